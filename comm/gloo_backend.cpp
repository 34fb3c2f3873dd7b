// The Gloo backend (comm/gloo_backend.h).
//
// One worker thread per group runs the queued collectives in issue order (or the thread
// waiting for the next one runs it: Note [Run inline when idle]), so every rank runs the
// same sequence; each collective carries its own tag (its position in that sequence and
// what it is: Note [Tags name the call]) and Gloo's end-to-end timeout. A failed or
// timed-out collective breaks the group (Gloo's pairs are left in an unknown state):
// later collectives fail at once with the first error, as PyTorch's ProcessGroupGloo does.
#include "comm/gloo_backend.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <cstring>
#include <deque>
#include <initializer_list>
#include <thread>

#include "base/error.h"
#include "core/half.h"

namespace ember::comm {
namespace {

// Gloo's rendezvous store interface over an ember Store.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(std::shared_ptr<comm::Store> s, Duration timeout) : s_(std::move(s)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    s_->set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    s_->wait({key}, timeout_);
    const std::string v = s_->get(key);
    return {v.begin(), v.end()};
  }
  void wait(const std::vector<std::string>& keys) override { s_->wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    s_->wait(keys, timeout);
  }

 private:
  std::shared_ptr<comm::Store> s_;
  Duration timeout_;
};

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <class T, class Acc, ReduceOp Op>
void reduce_into(void* c_, const void* a_, const void* b_, size_t n) {
  T* c = static_cast<T*>(c_);
  const T* a = static_cast<const T*>(a_);
  const T* b = static_cast<const T*>(b_);
  for (size_t i = 0; i < n; ++i) {
    const Acc x = static_cast<Acc>(a[i]), y = static_cast<Acc>(b[i]);
    if constexpr (Op == ReduceOp::kMax) c[i] = static_cast<T>(x > y ? x : y);
    else if constexpr (Op == ReduceOp::kMin) c[i] = static_cast<T>(x < y ? x : y);
    else c[i] = static_cast<T>(x + y);
  }
}

template <class T, class Acc>
ReduceFn pick(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax: return reduce_into<T, Acc, ReduceOp::kMax>;
    case ReduceOp::kMin: return reduce_into<T, Acc, ReduceOp::kMin>;
    default: return reduce_into<T, Acc, ReduceOp::kSum>;
  }
}

ReduceFn reduce_fn(DType t, ReduceOp op) {
  switch (t) {
    case DType::Float32: return pick<float, float>(op);
    case DType::Float64: return pick<double, double>(op);
    case DType::Float16: return pick<Half, float>(op);
    case DType::BFloat16: return pick<BFloat16, float>(op);
    case DType::Int32: return pick<int32_t, int32_t>(op);
    case DType::Int64: return pick<int64_t, int64_t>(op);
    case DType::UInt8: return pick<uint8_t, uint8_t>(op);
    case DType::Bool: return pick<uint8_t, uint8_t>(op);  // max: or, min: and (sum is refused earlier)
  }
  return nullptr;
}

// Divides n elements in place by `by` (kAvg after the sum).
template <class T>
void divide(void* p, size_t n, int by) {
  T* x = static_cast<T*>(p);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<T>(static_cast<float>(x[i]) / static_cast<float>(by));
}
void divide_by(DType t, void* p, size_t n, int by) {
  switch (t) {
    case DType::Float32: divide<float>(p, n, by); break;
    case DType::Float64: {
      double* x = static_cast<double*>(p);
      for (size_t i = 0; i < n; ++i) x[i] /= by;
      break;
    }
    case DType::Float16: divide<Half>(p, n, by); break;
    case DType::BFloat16: divide<BFloat16>(p, n, by); break;
    case DType::Int32: {
      int32_t* x = static_cast<int32_t*>(p);
      for (size_t i = 0; i < n; ++i) x[i] /= by;
      break;
    }
    case DType::Int64: {
      int64_t* x = static_cast<int64_t*>(p);
      for (size_t i = 0; i < n; ++i) x[i] /= by;
      break;
    }
    case DType::UInt8:
    case DType::Bool: {
      uint8_t* x = static_cast<uint8_t*>(p);
      for (size_t i = 0; i < n; ++i) x[i] = static_cast<uint8_t>(x[i] / by);
      break;
    }
  }
}

// Note [Tags name the call]: ranks that issue different collectives at the same
// position must not exchange data. Under one tag Gloo matches their messages, and a
// message longer than the receiver posted throws in Gloo's device thread, where nothing
// catches it (std::terminate: the process aborts); a shorter one, another dtype, reduce
// op or collective over the same bytes gives a silent wrong answer. So the tag holds,
// besides the position's low 12 bits, 20 bits of a hash of the call (collective, reduce
// op, dtype, element count, root): mismatched calls use different slots, pass nothing,
// and time out with an error on every rank. Free on the normal path; a hash collision (one
// in a million) falls back to Gloo's behaviour. 12 bits of position are plenty: a rank
// cannot get thousands of collectives ahead of a peer, each needs the peers' receives.
// EMBER_DISTRIBUTED_DEBUG=detail (comm/process_group.h) names the calls instead.
uint32_t call_hash(Collective c, std::initializer_list<int64_t> fields = {}) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the collective's and the fields' bytes
  auto mix = [&h](int64_t f) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((static_cast<uint64_t>(f) >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  };
  mix(static_cast<int64_t>(c));
  for (int64_t f : fields) mix(f);
  return static_cast<uint32_t>(h >> 44);  // 20 bits
}

class GlooBackend final : public Backend {
 public:
  GlooBackend(std::shared_ptr<Store> store, int rank, int size, const std::string& hostname, Duration timeout)
      : rank_(rank), size_(size), timeout_(timeout) {
    gloo::transport::tcp::attr attr(hostname.c_str());
    device_ = gloo::transport::tcp::CreateDevice(attr);
    context_ = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context_->setTimeout(timeout);
    GlooStore gs(std::move(store), timeout);
    try {
      context_->connectFullMesh(gs, device_);
    } catch (const ember::Error&) {
      throw;
    } catch (const std::exception& e) {
      EMBER_FAIL("ProcessGroup (gloo): rank ", rank, " of ", size, " could not connect to its peers: ", e.what());
    }
    worker_ = std::thread([this] { run(); });
  }

  // The worker runs what is queued, waits for a collective running inline, then ends.
  ~GlooBackend() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !running_; });
  }

  std::string name() const override { return "gloo"; }

  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op, std::string what) override {
    const uint32_t call =
        call_hash(Collective::kAllReduce, {static_cast<int64_t>(op), static_cast<int64_t>(t.dtype()), t.numel()});
    return enqueue(std::move(what), call, [this, t, op](uint32_t tag) {
      const size_t n = static_cast<size_t>(t.numel());
      if (n == 0 || size_ == 1) {
        if (op == ReduceOp::kAvg) divide_by(t.dtype(), t.data_ptr(), n, size_);
        return;
      }
      gloo::AllreduceOptions opts(context_);
      set_output(opts, t);
      opts.setReduceFunction(reduce_fn(t.dtype(), op));
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::allreduce(opts);
      if (op == ReduceOp::kAvg) divide_by(t.dtype(), t.data_ptr(), n, size_);
    });
  }

  std::shared_ptr<Work> broadcast(const Tensor& t, int root, std::string what) override {
    const uint32_t call = call_hash(Collective::kBroadcast, {root, static_cast<int64_t>(t.dtype()), t.numel()});
    return enqueue(std::move(what), call, [this, t, root](uint32_t tag) {
      if (t.numel() == 0 || size_ == 1) return;
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(static_cast<char*>(t.data_ptr()), bytes(t));
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::broadcast(opts);
    });
  }

  std::shared_ptr<Work> all_gather(const Tensor& out, const Tensor& in, std::string what) override {
    const uint32_t call = call_hash(Collective::kAllGather, {static_cast<int64_t>(in.dtype()), in.numel()});
    return enqueue(std::move(what), call, [this, out, in](uint32_t tag) {
      if (in.numel() == 0) return;
      if (size_ == 1) {
        std::memcpy(out.data_ptr(), in.data_ptr(), bytes(in));
        return;
      }
      gloo::AllgatherOptions opts(context_);
      opts.setInput(static_cast<char*>(in.data_ptr()), bytes(in));
      opts.setOutput(static_cast<char*>(out.data_ptr()), bytes(out));
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::allgather(opts);
    });
  }

  // An all-reduce of a copy of `in`, then this rank's share copied out: Gloo's
  // options-style API has no reduce-scatter (its ReduceScatterHalvingDoubling is the
  // old algorithm API). Twice the traffic of a true reduce-scatter; DDP does not use it.
  std::shared_ptr<Work> reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op, std::string what) override {
    const uint32_t call = call_hash(Collective::kReduceScatter,
                                    {static_cast<int64_t>(op), static_cast<int64_t>(in.dtype()), out.numel()});
    return enqueue(std::move(what), call, [this, out, in, op](uint32_t tag) {
      const size_t n = static_cast<size_t>(out.numel());
      if (n == 0) return;
      Tensor tmp = in.clone();
      if (size_ > 1) {
        gloo::AllreduceOptions opts(context_);
        set_output(opts, tmp);
        opts.setReduceFunction(reduce_fn(in.dtype(), op));
        opts.setTag(tag);
        opts.setTimeout(timeout_);
        gloo::allreduce(opts);
      }
      const size_t es = static_cast<size_t>(in.element_size());
      std::memcpy(out.data_ptr(), static_cast<char*>(tmp.data_ptr()) + rank_ * n * es, n * es);
      if (op == ReduceOp::kAvg) divide_by(out.dtype(), out.data_ptr(), n, size_);
    });
  }

  std::shared_ptr<Work> barrier(std::string what) override {
    return enqueue(std::move(what), call_hash(Collective::kBarrier), [this](uint32_t tag) {
      if (size_ == 1) return;
      gloo::BarrierOptions opts(context_);
      opts.setTag(tag);
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

 private:
  struct Task {
    std::shared_ptr<Work> work;
    uint32_t call;  // call_hash of the collective
    std::function<void(uint32_t)> run;
  };

  static size_t bytes(const Tensor& t) { return static_cast<size_t>(t.numel() * t.element_size()); }

  // Gloo's setOutput is typed; the element size is all it uses the type for.
  static void set_output(gloo::AllreduceOptions& opts, const Tensor& t) {
    const size_t n = static_cast<size_t>(t.numel());
    switch (t.element_size()) {
      case 1: opts.setOutput(static_cast<uint8_t*>(t.data_ptr()), n); break;
      case 2: opts.setOutput(static_cast<uint16_t*>(t.data_ptr()), n); break;
      case 4: opts.setOutput(static_cast<uint32_t*>(t.data_ptr()), n); break;
      default: opts.setOutput(static_cast<uint64_t*>(t.data_ptr()), n); break;
    }
  }

  std::shared_ptr<Work> enqueue(std::string what, uint32_t call, std::function<void(uint32_t)> run) {
    auto work = std::make_shared<Work>(std::move(what));
    Work* w = work.get();
    work->set_helper([this, w] { return try_inline(w); });
    {
      std::lock_guard lock(mu_);
      queue_.push_back({work, call, std::move(run)});
    }
    cv_.notify_all();
    return work;
  }

  // Note [Run inline when idle]: a thread that waits for a collective nobody has started
  // (it is first in the queue, the worker is idle) runs it itself, saving the worker's
  // wake-up, which costs a scheduler tick on the 2-vCPU machines measured. Order is kept:
  // only the head of the queue runs, and only while nothing else runs.
  bool try_inline(Work* w) {
    Task task;
    uint32_t tag;
    {
      std::lock_guard lock(mu_);
      if (running_ || queue_.empty() || queue_.front().work.get() != w) return false;
      task = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
      tag = next_tag(task.call);
    }
    execute(task, tag);
    {
      std::lock_guard lock(mu_);
      running_ = false;
    }
    cv_.notify_all();
    return true;
  }

  void run() {
    while (true) {
      Task task;
      uint32_t tag;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return !running_ && (stop_ || !queue_.empty()); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
        running_ = true;
        tag = next_tag(task.call);
      }
      task.work->set_helper(nullptr);  // waits for a helper call in progress (it finds nothing to run)
      execute(task, tag);
      {
        std::lock_guard lock(mu_);
        running_ = false;
      }
      cv_.notify_all();
    }
  }

  // The tag of the next collective, under mu_ (Note [Tags name the call]).
  uint32_t next_tag(uint32_t call) { return (call << 12) | (++position_ & 0xfff); }

  // Runs one collective; one at a time (running_), in issue order.
  void execute(Task& task, uint32_t tag) {
    if (broken_) {
      task.work->finish(std::make_exception_ptr(
          Error(task.work->description() + ": not run, the group broke earlier: " + broken_message_)));
      return;
    }
    try {
      task.run(tag);
      task.work->finish();
    } catch (const std::exception& e) {
      broken_ = true;
      broken_message_ = task.work->description() + " failed: " + e.what();
      const bool timed_out = std::strstr(e.what(), "imeout") || std::strstr(e.what(), "imed out");
      task.work->finish(std::make_exception_ptr(
          Error(broken_message_ + (timed_out ? " (a peer rank died, or did not call this same collective; "
                                               "EMBER_DISTRIBUTED_DEBUG=detail names each rank's call)"
                                             : ""))));
    }
  }

  int rank_, size_;
  Duration timeout_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stop_ = false;
  bool running_ = false;  // a collective is executing (on the worker or inline)
  uint32_t position_ = 0;
  bool broken_ = false;  // read and written by the one executing collective
  std::string broken_message_;
};

}  // namespace

std::unique_ptr<Backend> make_gloo_backend(std::shared_ptr<Store> store, int rank, int size,
                                           const std::string& hostname, Duration timeout) {
  return std::make_unique<GlooBackend>(std::move(store), rank, size, hostname, timeout);
}

}  // namespace ember::comm
