// The NCCL backend (comm/nccl_backend.h).
//
// Note [NCCL backend]. One communicator per CUDA device, made at the first collective on
// it: every rank announces itself through the store, rank 0 publishes an NCCL unique id,
// every rank calls ncclCommInitRankConfig on that device. Each communicator has its own
// communication stream. A collective
//   1. records an event on the caller's current stream and makes the communication
//      stream wait for it (the tensor's producers are done before NCCL reads it);
//   2. queues the NCCL call on the communication stream and records a `done` event;
//   3. marks the tensor's memory as used on the communication stream (record_stream), so
//      the caching allocator does not hand it out again before NCCL is through with it;
//   4. returns a Work whose wait() makes the waiter's current stream wait for `done`.
// The host never waits (Note [Waiting for a collective on CUDA tensors]). A watchdog
// thread polls the `done` events: a completed one finishes its Work; one older than the
// timeout, or an asynchronous NCCL error, aborts every communicator (which releases the
// kernels waiting for a dead peer, so the streams move on), fails every pending Work with
// an error naming the collective, and breaks the backend: every later collective fails
// at once with that error, as PyTorch's ProcessGroupNCCL does with async error handling.
//
// Note [Non-blocking communicators]. Some NCCL calls wait on the host for the peers: init,
// finalize, and (NCCL >= 2.22 connects lazily) a communicator's first collective. On a
// blocking communicator a peer that died or hangs keeps that call from returning, and no
// thread can safely abort it: a hang, not an error. So the communicators are made with
// config.blocking = 0 (as PyTorch's ProcessGroupNCCL does with
// TORCH_NCCL_USE_COMM_NONBLOCKING=1): such a call returns
// ncclInProgress and carries on inside NCCL, and the caller polls ncclCommGetAsyncError
// until it is done, up to the timeout; past it, the communicator is aborted and the error
// names the call. NCCL allows no other call on the communicator meanwhile, so one
// collective is issued at a time (issue_mu_), and every NCCL call, the watchdog's included,
// holds mu_, which a poll releases between calls.
#include "comm/nccl_backend.h"

#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "base/error.h"
#include "core/stream.h"

namespace ember::comm {
namespace {

using Clock = std::chrono::steady_clock;

std::string nccl_message(ncclResult_t r, ncclComm_t comm) {
  std::string m = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') m += std::string(" (") + last + ")";
  return m;
}

ncclDataType_t nccl_dtype(DType t) {
  switch (t) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Int32: return ncclInt32;
    case DType::Int64: return ncclInt64;
    case DType::UInt8:
    case DType::Bool: return ncclUint8;  // max: or, min: and (ProcessGroup refuses sum on bool)
  }
  EMBER_FAIL("NCCL: no NCCL type for ", dtype_name(t));
}

// ncclAvg divides by the rank count after the sum (integers: truncated), as kAvg means.
ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  return ncclSum;
}

cudaStream_t handle(const Stream& s) { return reinterpret_cast<cudaStream_t>(s.id()); }

constexpr std::chrono::milliseconds kPoll(1);
constexpr int kSpins = 64;  // polls of an in-progress call that only yield, so one that ends soon costs no sleep

ncclConfig_t non_blocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// Polls a non-blocking communicator whose last call returned `r` until it is no longer in
// progress or `deadline` passes (then ncclInProgress). Used where no other thread knows the
// communicator yet, or any more: init and finalize.
ncclResult_t settle(ncclComm_t comm, ncclResult_t r, Clock::time_point deadline) {
  for (int i = 0; r == ncclInProgress && Clock::now() < deadline; ++i) {
    if (i < kSpins) std::this_thread::yield();
    else std::this_thread::sleep_for(kPoll);
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) return ncclInternalError;
  }
  return r;
}

class NcclBackend final : public Backend {
 public:
  NcclBackend(std::shared_ptr<Store> store, int rank, int size, Duration timeout)
      : store_(std::move(store)), rank_(rank), size_(size), timeout_(timeout) {
    watchdog_ = std::thread([this] { watch(); });
  }

  // Waits for the queued collectives (the watchdog finishes or fails them), then frees the
  // communicators: finalized and destroyed when healthy, aborted when broken or when
  // finalizing takes longer than the timeout.
  ~NcclBackend() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
    for (auto& [index, c] : comms_) {
      if (c->comm == nullptr) continue;
      // Finalizing flushes what this rank queued; a peer gone meanwhile makes it time out.
      const auto deadline = Clock::now() + timeout_;
      if (broken_.empty() && settle(c->comm, ncclCommFinalize(c->comm), deadline) == ncclSuccess) {
        ncclCommDestroy(c->comm);
      } else {
        ncclCommAbort(c->comm);
      }
    }
  }

  std::string name() const override { return "nccl"; }

  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op, std::string what) override {
    const auto n = static_cast<size_t>(t.numel());
    return launch(t, {t}, std::move(what), [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), n, nccl_dtype(t.dtype()), nccl_op(op), c, s);
    });
  }

  std::shared_ptr<Work> broadcast(const Tensor& t, int root, std::string what) override {
    const auto n = static_cast<size_t>(t.numel() * t.element_size());
    return launch(t, {t}, std::move(what), [&](ncclComm_t c, cudaStream_t s) {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), n, ncclUint8, root, c, s);
    });
  }

  std::shared_ptr<Work> all_gather(const Tensor& out, const Tensor& in, std::string what) override {
    const auto n = static_cast<size_t>(in.numel() * in.element_size());
    return launch(in, {out, in}, std::move(what), [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllGather(in.data_ptr(), out.data_ptr(), n, ncclUint8, c, s);
    });
  }

  std::shared_ptr<Work> reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op, std::string what) override {
    const auto n = static_cast<size_t>(out.numel());
    return launch(in, {out, in}, std::move(what), [&](ncclComm_t c, cudaStream_t s) {
      return ncclReduceScatter(in.data_ptr(), out.data_ptr(), n, nccl_dtype(in.dtype()), nccl_op(op), c, s);
    });
  }

  // The CPU backend serves ProcessGroup::barrier; this one is for groups with NCCL alone.
  std::shared_ptr<Work> barrier(std::string what) override {
    auto work = std::make_shared<Work>(std::move(what));
    work->finish(std::make_exception_ptr(Error(work->description() + ": the NCCL backend has no barrier of its own")));
    return work;
  }

 private:
  struct Comm {
    Device device;
    ncclComm_t comm;
    Stream stream;
  };
  struct Pending {
    std::shared_ptr<Work> work;
    std::shared_ptr<Event> done;
    Clock::time_point start;
  };

  using Call = std::function<ncclResult_t(ncclComm_t, cudaStream_t)>;

  std::shared_ptr<Work> failed(std::shared_ptr<Work> work, const std::string& why) {
    work->finish(std::make_exception_ptr(Error(work->description() + ": " + why)));
    return work;
  }

  // Breaks the backend over `work`, which was never queued (the watchdog does not know it).
  std::shared_ptr<Work> break_over(std::shared_ptr<Work> work, const std::string& failure) {
    break_all(failure);
    work->finish(std::make_exception_ptr(Error(broken_)));
    return work;
  }

  std::shared_ptr<Work> launch(const Tensor& t, std::vector<Tensor> used, std::string what, const Call& call) {
    auto work = std::make_shared<Work>(std::move(what));
    bool empty = true;
    for (const Tensor& u : used) empty = empty && u.numel() == 0;
    if (empty) {  // nothing to send; NCCL is not asked, so no rank makes a communicator for it
      work->finish();
      return work;
    }
    const Device device = t.device();
    Comm& c = comm_for(device, work->description());
    std::lock_guard issue(issue_mu_);  // Note [Non-blocking communicators]
    std::unique_lock lock(mu_);
    if (!broken_.empty()) return failed(work, "not run, the NCCL communicator broke earlier: " + broken_);
    CudaDeviceGuard on(device.index);
    Event ready(device);
    ready.record(Stream::current(device));
    c.stream.wait(ready);
    const auto start = Clock::now();
    ncclResult_t r = call(c.comm, handle(c.stream));
    if (r != ncclSuccess && r != ncclInProgress)  // refused (bad arguments): the communicator stays usable
      return failed(work, "NCCL refused it: " + nccl_message(r, c.comm));
    // In progress: NCCL connects to the peers (the first collective) or queues the call.
    for (int i = 0; r == ncclInProgress; ++i) {
      if (i < kSpins) {
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
      } else {
        cv_.wait_for(lock, kPoll);
      }
      if (!broken_.empty()) return failed(work, "not run, the NCCL communicator broke: " + broken_);
      if (Clock::now() - start > timeout_)
        return break_over(work, detail::str(work->description(), " timed out after ", timeout_.count(),
                                            " ms before NCCL could queue it (connecting to its peers: a peer rank "
                                            "died, hangs, or issued other collectives)"));
      if (ncclCommGetAsyncError(c.comm, &r) != ncclSuccess) r = ncclInternalError;
    }
    if (r != ncclSuccess)  // the call failed inside NCCL: the communicator cannot be trusted
      return break_over(work, work->description() + " failed in NCCL: " + nccl_message(r, c.comm));
    for (const Tensor& u : used) u.record_stream(c.stream);
    auto done = std::make_shared<Event>(device);
    done->record(c.stream);
    work->set_stream_wait([done, device] { Stream::current(device).wait(*done); });
    pending_.push_back({work, std::move(done), Clock::now()});
    cv_.notify_all();
    return work;
  }

  // The communicator of `device`, made on first use (Note [NCCL backend]).
  Comm& comm_for(Device device, const std::string& what) {
    std::lock_guard create(create_mu_);  // one bootstrap at a time; mu_ stays free for the watchdog
    {
      std::lock_guard lock(mu_);
      if (auto it = comms_.find(device.index); it != comms_.end()) return *it->second;
      if (!broken_.empty()) EMBER_FAIL(what, ": not run, the NCCL communicator broke earlier: ", broken_);
    }
    const std::string key = "comm" + std::to_string(comms_made_++);
    try {
      const std::string id_bytes = exchange_nccl_unique_id(*store_, key, rank_, size_, timeout_);
      ncclUniqueId id;
      std::copy(id_bytes.begin(), id_bytes.end(), id.internal);
      CudaDeviceGuard on(device.index);
      ncclComm_t comm = nullptr;
      ncclConfig_t config = non_blocking_config();  // Note [Non-blocking communicators]
      ncclResult_t r = ncclCommInitRankConfig(&comm, size_, id, rank_, &config);
      if (r == ncclSuccess || r == ncclInProgress) r = settle(comm, r, Clock::now() + timeout_);
      if (r != ncclSuccess) {
        const std::string why = r == ncclInProgress
                                    ? detail::str("its peers did not all join within ", timeout_.count(), " ms")
                                    : nccl_message(r, comm);
        if (comm != nullptr) ncclCommAbort(comm);
        EMBER_FAIL("could not create the communicator on ", device.str(), ": ", why);
      }
      auto c = std::make_unique<Comm>(Comm{device, comm, Stream::create(device)});
      std::lock_guard lock(mu_);
      return *comms_.emplace(device.index, std::move(c)).first->second;
    } catch (const Error& e) {
      std::lock_guard lock(mu_);
      if (broken_.empty()) broken_ = e.what();  // the ranks' bootstraps are out of step now
      EMBER_FAIL("ProcessGroup (nccl), rank ", rank_, " of ", size_, ", at ", what, ": ", e.what());
    }
  }

  void watch() {
    std::unique_lock lock(mu_);
    while (true) {
      if (pending_.empty()) {
        if (stop_) return;
        cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
        continue;
      }
      cv_.wait_for(lock, kPoll);
      const auto now = Clock::now();
      std::string failure;
      for (auto it = pending_.begin(); it != pending_.end();) {
        bool done = false;
        try {
          done = it->done->query();
        } catch (const std::exception& e) {
          failure = it->work->description() + " failed on the device: " + e.what();
          break;
        }
        if (done) {
          it->work->finish();
          it = pending_.erase(it);
        } else if (now - it->start > timeout_) {
          failure = detail::str(it->work->description(), " timed out after ", timeout_.count(),
                                " ms (a peer rank died, or did not issue the same collectives in the same order)");
          break;
        } else {
          ++it;
        }
      }
      for (auto& [index, c] : comms_) {
        ncclResult_t async = ncclSuccess;
        if (failure.empty() && c->comm != nullptr && ncclCommGetAsyncError(c->comm, &async) == ncclSuccess &&
            async != ncclSuccess && async != ncclInProgress)
          failure = "NCCL reported an error on " + c->device.str() + ": " + nccl_message(async, c->comm);
      }
      if (!failure.empty()) break_all(failure);
    }
  }

  // Aborts every communicator and fails what is pending (the watchdog, holding mu_).
  void break_all(const std::string& failure) {
    broken_ = failure + "; the NCCL communicator was aborted";
    std::fprintf(stderr, "ember: rank %d: %s\n", rank_, broken_.c_str());
    for (auto& [index, c] : comms_)
      if (c->comm != nullptr) {
        ncclCommAbort(c->comm);
        c->comm = nullptr;
      }
    for (auto& p : pending_) p.work->finish(std::make_exception_ptr(Error(broken_)));
    pending_.clear();
  }

  std::shared_ptr<Store> store_;
  int rank_, size_;
  Duration timeout_;
  std::mutex create_mu_;
  int64_t comms_made_ = 0;  // under create_mu_
  std::mutex issue_mu_;     // one collective issued at a time, its in-progress polls included
  std::mutex mu_;           // guards what follows, and every NCCL call on a communicator
  std::condition_variable cv_;
  std::map<int, std::unique_ptr<Comm>> comms_;
  std::deque<Pending> pending_;
  std::string broken_;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace

std::string exchange_nccl_unique_id(Store& store, const std::string& key, int rank, int size, Duration timeout) {
  store.set(key + "/arrived/" + std::to_string(rank), "1");
  std::vector<std::string> arrived;
  for (int r = 0; r < size; ++r) arrived.push_back(key + "/arrived/" + std::to_string(r));
  try {
    store.wait(arrived, timeout);
  } catch (const Error&) {
    const std::vector<bool> present = store.check(arrived);
    std::string missing;
    int n = 0;
    for (int r = 0; r < size; ++r)
      if (!present[r]) missing += (n++ ? ", " : "") + std::to_string(r);
    EMBER_FAIL("NCCL bootstrap timed out after ", timeout.count(), " ms on rank ", rank, ": rank", n > 1 ? "s " : " ",
               missing, " of ", size, " did not reach it (crashed, or issued other collectives first)");
  }
  if (rank == 0) {
    ncclUniqueId id;
    const ncclResult_t r = ncclGetUniqueId(&id);
    EMBER_CHECK(r == ncclSuccess, "ncclGetUniqueId failed: ", ncclGetErrorString(r));
    store.set(key + "/id", std::string(id.internal, sizeof id.internal));
  }
  store.wait({key + "/id"}, timeout);
  std::string id = store.get(key + "/id");
  EMBER_CHECK(id.size() == NCCL_UNIQUE_ID_BYTES, "NCCL bootstrap: the unique id in the store has ", id.size(),
              " bytes, not ", NCCL_UNIQUE_ID_BYTES);
  return id;
}

std::unique_ptr<Backend> make_nccl_backend(std::shared_ptr<Store> store, int rank, int size, Duration timeout) {
  return std::make_unique<NcclBackend>(std::move(store), rank, size, timeout);
}

}  // namespace ember::comm
