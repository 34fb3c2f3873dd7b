// ProcessGroup and Work (comm/process_group.h).
#include "comm/process_group.h"

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "base/error.h"
#include "comm/gloo_backend.h"
#include "core/ops.h"
#if EMBER_COMM_NCCL
#include "comm/nccl_backend.h"
#endif

namespace ember::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kBarrier: return "barrier";
  }
  return "?";
}

bool collective_checks_from_env() {
  const char* v = std::getenv("EMBER_DISTRIBUTED_DEBUG");
  if (v == nullptr) return false;
  std::string s = v;
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s.empty() || s == "off") return false;
  EMBER_CHECK(s == "detail", "EMBER_DISTRIBUTED_DEBUG='", v, "' is neither off nor detail");
  return true;
}

// ----- Work -----

namespace {
constexpr std::chrono::microseconds kSpin(500);
}  // namespace

void Work::wait(Duration timeout) {
  if (stream_wait_) {
    {
      std::lock_guard lock(mu_);
      if (error_) std::rethrow_exception(error_);
    }
    stream_wait_();
    return;
  }
  if (inner_) {
    inner_->wait(timeout);
    std::lock_guard lock(mu_);
    if (!then_ran_) {
      then_ran_ = true;
      then_();
    }
    return;
  }
  {
    std::lock_guard h(helper_mu_);
    if (helper_) {
      helper_();
      helper_ = nullptr;
    }
  }
  // Note [Spin before blocking]: a thread that blocks is woken a scheduler tick (4 ms)
  // late on the 2-vCPU VMs this was measured on, longer than a small all-reduce takes
  // (0.2 ms); yielding for up to kSpin first catches most completions without that
  // wake-up. Yielding, not busy-waiting: the other threads keep the core.
  const auto spin_end = std::chrono::steady_clock::now() + std::min<std::chrono::microseconds>(timeout, kSpin);
  while (!completed() && std::chrono::steady_clock::now() < spin_end) std::this_thread::yield();
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return done_; }))
    EMBER_FAIL(description_, ": timed out after ", timeout.count(),
               " ms (a peer rank died, or did not issue the same collectives in the same order; "
               "EMBER_DISTRIBUTED_DEBUG=detail names each rank's call)");
  if (error_) std::rethrow_exception(error_);
}

void Work::set_helper(std::function<bool()> helper) {
  std::lock_guard h(helper_mu_);
  helper_ = std::move(helper);
}

void Work::set_stream_wait(std::function<void()> order) { stream_wait_ = std::move(order); }

bool Work::completed() const {
  if (inner_) return inner_->completed();
  std::lock_guard lock(mu_);
  return done_;
}

void Work::finish(std::exception_ptr error) {
  {
    std::lock_guard lock(mu_);
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

std::shared_ptr<Work> Work::then(std::shared_ptr<Work> inner, std::function<void()> then) {
  auto w = std::make_shared<Work>(inner->description());
  w->default_timeout_ = inner->default_timeout_;
  w->inner_ = std::move(inner);
  w->then_ = std::move(then);
  return w;
}

// ----- ProcessGroup -----

namespace {

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "127.0.0.1";
  return name;
}

}  // namespace

ProcessGroup::ProcessGroup(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options)
    : store_(std::move(store)), rank_(rank), size_(size), options_(std::move(options)) {
  EMBER_CHECK(store_ != nullptr, "ProcessGroup: no store");
  EMBER_CHECK(size >= 1, "ProcessGroup: world size must be at least 1, got ", size);
  EMBER_CHECK(rank >= 0 && rank < size, "ProcessGroup: rank ", rank, " is outside [0, ", size, ")");
  EMBER_CHECK(options_.timeout.count() > 0, "ProcessGroup: timeout must be positive, got ", options_.timeout.count(),
              " ms");
  // Each group on a store gets its own keys: the n-th group this rank makes on it is
  // "pg<n>", the same n on every rank as long as ranks make their groups in the same order.
  const int64_t n = store_->add("pg_count/" + std::to_string(rank), 1);
  auto s = std::make_shared<PrefixStore>("pg" + std::to_string(n), store_);
  // Join: every rank says where it runs, then waits for all others, so that a missing
  // rank is named here rather than deep inside Gloo's connection setup.
  const std::string host = this_host();
  s->set("join/" + std::to_string(rank), host);
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back("join/" + std::to_string(r));
  try {
    s->wait(keys, options_.timeout);
  } catch (const Error&) {
    const std::vector<bool> present = s->check(keys);
    std::string missing;
    int n = 0;
    for (int r = 0; r < size; ++r)
      if (!present[r]) missing += (n++ ? ", " : "") + std::to_string(r);
    EMBER_FAIL("ProcessGroup: rendezvous timed out after ", options_.timeout.count(), " ms on rank ", rank, ": rank",
               n > 1 ? "s " : " ", missing, " of ", size, " never joined (not started, crashed, or given another ",
               "MASTER_ADDR / MASTER_PORT / job id)");
  }
  std::string hostname = options_.hostname;
  if (hostname.empty()) {
    bool one_host = true;
    for (int r = 0; r < size; ++r) one_host = one_host && s->get(keys[r]) == host;
    hostname = one_host ? "127.0.0.1" : host;
  }
  cpu_ = make_gloo_backend(std::make_shared<PrefixStore>("gloo", s), rank, size, hostname, options_.timeout);
#if EMBER_COMM_NCCL
  cuda_ = make_nccl_backend(std::make_shared<PrefixStore>("nccl", s), rank, size, options_.timeout);
#endif
}

ProcessGroup::~ProcessGroup() = default;

std::string ProcessGroup::next_key(const std::string& what) {
  return detail::str("k", keys_.fetch_add(1), "/", what);
}

void ProcessGroup::set_backend(DeviceType type, std::unique_ptr<Backend> backend) {
  (type == DeviceType::CPU ? cpu_ : cuda_) = std::move(backend);
}

Backend& ProcessGroup::backend_for(const Tensor& t, const char* op) {
  EMBER_CHECK(t.defined(), op, ": the tensor is undefined");
  EMBER_CHECK(t.is_contiguous(), op, ": the tensor must be contiguous (shape ", shape_str(t.shape()), ")");
  const DeviceType type = t.device().type;
  Backend* b = type == DeviceType::CPU ? cpu_.get() : cuda_.get();
  EMBER_CHECK(b != nullptr, op, ": no communication backend for ", device_type_name(type),
              " tensors in this process group (ember was built without NCCL)");
  return *b;
}

std::string ProcessGroup::describe(const char* op, const Tensor& t) const {
  return detail::str(op, " of ", t.numel(), " ", dtype_name(t.dtype()), " elements on rank ", rank_, " (ranks 0-",
                     size_ - 1, " of ", size_, ")");
}

std::shared_ptr<Work> ProcessGroup::with_timeout(std::shared_ptr<Work> w) const {
  w->set_default_timeout(options_.timeout);
  return w;
}

// Note [Checking that ranks agree]: under check_collectives every collective first
// all-gathers its Call over Gloo (the CPU backend, whatever the tensors' device, as
// PyTorch's ProcessGroupWrapper does under TORCH_DISTRIBUTED_DEBUG=DETAIL) and waits for
// it. Every rank then holds every rank's call; when they differ, each raises an
// error naming them all and runs nothing, so the group stays usable. A rank that never
// calls shows as the exchange's timeout. The wait costs CUDA collectives their asynchrony
// on the host: a mode for finding a bug, not for training.
ProcessGroup::Call ProcessGroup::call_of(Collective op, const Tensor& t, int64_t reduce, int64_t root) {
  const int64_t dtype = static_cast<int64_t>(t.dtype()), device = static_cast<int64_t>(t.device().type);
  return {static_cast<int64_t>(op), reduce, dtype, t.numel(), root, device};
}

void ProcessGroup::check_agreement(const Call& call, const std::string& what) {
  if (!options_.check_collectives || size_ == 1) return;
  EMBER_CHECK(cpu_ != nullptr, what, ": EMBER_DISTRIBUTED_DEBUG=detail checks collectives over the CPU backend, ",
              "which this group lacks");
  constexpr int64_t kFields = sizeof(Call) / sizeof(int64_t);
  const int64_t n = ++checked_;
  Tensor mine = zeros({kFields}, kInt64), all = zeros({kFields * size_}, kInt64);
  std::memcpy(mine.data_ptr(), &call, sizeof call);
  try {
    cpu_->all_gather(all, mine, detail::str("the EMBER_DISTRIBUTED_DEBUG check of collective ", n))
        ->wait(options_.timeout);
  } catch (const Error& e) {
    EMBER_FAIL(what, ": ", e.what());  // a rank died or never called: named like the collective's own failure
  }
  std::vector<Call> calls(size_);
  std::memcpy(calls.data(), all.data_ptr(), sizeof(Call) * size_);
  auto same = [](const Call& a, const Call& b) { return std::memcmp(&a, &b, sizeof(Call)) == 0; };
  bool agree = true;
  for (const Call& c : calls) agree = agree && same(c, calls[0]);
  if (agree) return;
  auto describe_call = [](const Call& c) {
    std::string d = collective_name(static_cast<Collective>(c.op));
    if (c.reduce >= 0) d += detail::str(" (", reduce_op_name(static_cast<ReduceOp>(c.reduce)), ")");
    if (c.numel >= 0) d += detail::str(" of ", c.numel, " ", dtype_name(static_cast<DType>(c.dtype)), " elements");
    if (c.root >= 0) d += detail::str(" from rank ", c.root);
    if (c.device >= 0) d += detail::str(" on ", device_type_name(static_cast<DeviceType>(c.device)), " tensors");
    return d;
  };
  // Ranks that issued the same call are named together, in order of their first rank.
  std::string calls_text;
  std::vector<bool> named(size_, false);
  for (int r = 0; r < size_; ++r) {
    if (named[r]) continue;
    std::string ranks;
    int count = 0;
    for (int q = r; q < size_; ++q)
      if (!named[q] && same(calls[q], calls[r])) {
        named[q] = true;
        ranks += (count++ ? ", " : "") + std::to_string(q);
      }
    calls_text += detail::str(calls_text.empty() ? "" : "; ", count > 1 ? "ranks " : "rank ", ranks, ": ",
                              describe_call(calls[r]));
  }
  EMBER_FAIL(what, ": the ranks issued different collectives as collective ", n,
             " of the group (EMBER_DISTRIBUTED_DEBUG=detail), so none was run: ", calls_text);
}

std::shared_ptr<Work> ProcessGroup::all_reduce(const Tensor& t, ReduceOp op) {
  Backend& b = backend_for(t, "all_reduce");
  EMBER_CHECK(t.dtype() != kBool || op == ReduceOp::kMax || op == ReduceOp::kMin,
              "all_reduce: bool tensors reduce with max (or) and min (and) only, not ", reduce_op_name(op));
  std::string what = describe((std::string("all_reduce (") + reduce_op_name(op) + ")").c_str(), t);
  check_agreement(call_of(Collective::kAllReduce, t, static_cast<int64_t>(op), -1), what);
  return with_timeout(b.all_reduce(t, op, std::move(what)));
}

std::shared_ptr<Work> ProcessGroup::broadcast(const Tensor& t, int root) {
  Backend& b = backend_for(t, "broadcast");
  EMBER_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " is outside [0, ", size_, ")");
  std::string what = describe("broadcast", t) + " from rank " + std::to_string(root);
  check_agreement(call_of(Collective::kBroadcast, t, -1, root), what);
  return with_timeout(b.broadcast(t, root, std::move(what)));
}

std::shared_ptr<Work> ProcessGroup::all_gather(const Tensor& out, const Tensor& in) {
  Backend& b = backend_for(in, "all_gather");
  backend_for(out, "all_gather");
  EMBER_CHECK(out.dtype() == in.dtype(), "all_gather: output dtype ", dtype_name(out.dtype()), " differs from input ",
              dtype_name(in.dtype()));
  EMBER_CHECK(out.device() == in.device(), "all_gather: output and input are on different devices");
  EMBER_CHECK(out.numel() == in.numel() * size_, "all_gather: output has ", out.numel(), " elements; ", size_,
              " ranks x ", in.numel(), " = ", in.numel() * size_, " expected");
  std::string what = describe("all_gather", in);
  check_agreement(call_of(Collective::kAllGather, in, -1, -1), what);
  return with_timeout(b.all_gather(out, in, std::move(what)));
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) {
  Backend& b = backend_for(in, "reduce_scatter");
  backend_for(out, "reduce_scatter");
  EMBER_CHECK(out.dtype() == in.dtype(), "reduce_scatter: output dtype ", dtype_name(out.dtype()),
              " differs from input ", dtype_name(in.dtype()));
  EMBER_CHECK(out.device() == in.device(), "reduce_scatter: output and input are on different devices");
  EMBER_CHECK(in.numel() == out.numel() * size_, "reduce_scatter: input has ", in.numel(), " elements; ", size_,
              " ranks x ", out.numel(), " = ", out.numel() * size_, " expected");
  EMBER_CHECK(in.dtype() != kBool || op == ReduceOp::kMax || op == ReduceOp::kMin,
              "reduce_scatter: bool tensors reduce with max (or) and min (and) only, not ", reduce_op_name(op));
  std::string what = describe((std::string("reduce_scatter (") + reduce_op_name(op) + ")").c_str(), in);
  check_agreement(call_of(Collective::kReduceScatter, in, static_cast<int64_t>(op), -1), what);
  return with_timeout(b.reduce_scatter(out, in, op, std::move(what)));
}

std::shared_ptr<Work> ProcessGroup::barrier() {
  EMBER_CHECK(cpu_ || cuda_, "barrier: the process group has no backend");
  Backend& b = cpu_ ? *cpu_ : *cuda_;
  std::string what = detail::str("barrier on rank ", rank_, " (ranks 0-", size_ - 1, " of ", size_, ")");
  check_agreement({static_cast<int64_t>(Collective::kBarrier), -1, -1, -1, -1, -1}, what);
  return with_timeout(b.barrier(std::move(what)));
}

}  // namespace ember::comm
