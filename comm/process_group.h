// ProcessGroup: the ranks of one job and the collectives they run together.
//
// A ProcessGroup checks each call's tensors once (contiguous, same dtype, sizes that
// fit) and hands it to the backend for the tensors' device: Gloo for CPU tensors
// (comm/gloo_backend.h), NCCL for CUDA tensors (comm/nccl_backend.h). Backend is the
// whole contract a backend fills; a device without a backend is an ember::Error naming
// the collective and the device.
//
// Every collective is asynchronous: it returns a Work at once, the backend runs the
// collectives in the order they were issued (the same order on every rank), and
// Work::wait() waits under a timeout. A collective or a wait that exceeds its timeout
// raises an ember::Error naming the collective, its size and the ranks: a rank that died
// or never called shows as an error, never as a hang.
//
// Ranks that issue different collectives (another op, reduce op, dtype, size or root: a
// user's bug) fail with an error after the timeout on CPU tensors (Note [Tags name the
// call] in comm/gloo_backend.cpp); NCCL may instead compute a wrong answer. With
// EMBER_DISTRIBUTED_DEBUG=detail every collective is checked first (Note [Checking that
// ranks agree] in comm/process_group.cpp), and a disagreement is an ember::Error on
// every rank that names each rank's call.
//
// Note [Waiting for a collective on CUDA tensors]: as in PyTorch, wait() on a CUDA
// collective does not block the host. It makes the calling thread's current stream wait
// for the collective, so later ops on that stream see its result, and returns. The
// backend's watchdog enforces the timeout: it aborts the collective and fails its Work;
// the next collective or wait then raises the error.
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "comm/store.h"
#include "core/tensor.h"

namespace ember::comm {

enum class ReduceOp { kSum, kAvg, kMax, kMin };
const char* reduce_op_name(ReduceOp op);

// The collectives, as the checks that ranks issue the same one name them (Gloo's tags:
// Note [Tags name the call]; EMBER_DISTRIBUTED_DEBUG: Note [Checking that ranks agree]).
enum class Collective : int64_t { kAllReduce, kBroadcast, kAllGather, kReduceScatter, kBarrier };
const char* collective_name(Collective c);

// The completion of one collective.
class Work {
 public:
  explicit Work(std::string description) : description_(std::move(description)) {}
  // Blocks until the collective has finished; rethrows its error. After `timeout` an
  // ember::Error names the collective (its description) and the time waited.
  void wait(Duration timeout);
  void wait() { wait(default_timeout_); }
  bool completed() const;
  const std::string& description() const { return description_; }

  // Backend side: the collective finished, with `error` when it failed.
  void finish(std::exception_ptr error = nullptr);
  void set_default_timeout(Duration t) { default_timeout_ = t; }
  // Backend side: called by wait() before waiting; it may run the collective on the
  // waiting thread and return true. Cleared (waiting for a call in progress) with nullptr.
  void set_helper(std::function<bool()> helper);
  // Backend side, for a collective on a device stream: wait() calls `order` (which makes
  // the caller's current stream wait for the collective) instead of blocking, and raises
  // only an error the backend already reported (Note [Waiting for a collective on CUDA tensors]).
  void set_stream_wait(std::function<void()> order);

  // A Work that waits for `inner`, then runs `then` once, on the first thread that waits
  // for it (a compression hook's decompression, for example).
  static std::shared_ptr<Work> then(std::shared_ptr<Work> inner, std::function<void()> then);

 private:
  std::string description_;
  Duration default_timeout_ = kDefaultTimeout;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::shared_ptr<Work> inner_;
  std::function<void()> then_;
  bool then_ran_ = false;
  std::mutex helper_mu_;  // apart from mu_: the helper finishes this Work, which takes mu_
  std::function<bool()> helper_;
  std::function<void()> stream_wait_;
};

// What a backend implements. The ProcessGroup has checked the arguments: tensors are
// contiguous and on the backend's device, sizes agree. Each call queues the collective
// and returns at once; collectives complete in the order they were issued.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op, std::string what) = 0;
  virtual std::shared_ptr<Work> broadcast(const Tensor& t, int root, std::string what) = 0;
  // out: [size * n] flat, in: [n] flat, rank r's `in` lands at out[r * n, (r + 1) * n).
  virtual std::shared_ptr<Work> all_gather(const Tensor& out, const Tensor& in, std::string what) = 0;
  // out: [n], in: [size * n]; rank r gets the reduction of every rank's in[r * n, (r + 1) * n).
  virtual std::shared_ptr<Work> reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op, std::string what) = 0;
  virtual std::shared_ptr<Work> barrier(std::string what) = 0;
};

// Whether EMBER_DISTRIBUTED_DEBUG asks for the check that ranks issue the same
// collectives: unset, empty or "off": no; "detail" (any case): yes; any other value is an
// ember::Error naming the variable.
bool collective_checks_from_env();

struct ProcessGroupOptions {
  Duration timeout = kDefaultTimeout;  // of each collective and of the rendezvous
  // The network address other ranks reach this one at (Gloo's TCP device). Empty: the
  // loopback address when every rank is on this host (local_world_size == world size),
  // else this host's name.
  std::string hostname{};
  // Check before each collective that every rank issues the same one; costs a small
  // all-gather over Gloo per collective (docs/distributed.md, "When ranks disagree").
  bool check_collectives = collective_checks_from_env();
};

class ProcessGroup {
 public:
  // Joins the group of `size` ranks as `rank`, meeting the others through `store` (the
  // caller gives each job, and each restart, its own prefix: PrefixStore; several groups
  // on one store are fine when every rank makes them in the same order). Returns when
  // every rank has joined; a rank missing after options.timeout is an ember::Error naming it.
  ProcessGroup(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options = {});
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  Duration timeout() const { return options_.timeout; }
  Store& store() { return *store_; }
  // A fresh key prefix, the same on every rank when ranks call it in the same order.
  std::string next_key(const std::string& what);

  // In place on every rank; kAvg divides the sum by size() (integers: truncated).
  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op = ReduceOp::kSum);
  // Rank `root`'s values into t on every rank.
  std::shared_ptr<Work> broadcast(const Tensor& t, int root = 0);
  // out: [size, ...in's shape] (or any shape with size × in.numel() elements).
  std::shared_ptr<Work> all_gather(const Tensor& out, const Tensor& in);
  // in: size × out.numel() elements; out: this rank's share of the reduction.
  std::shared_ptr<Work> reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::kSum);
  std::shared_ptr<Work> barrier();

  // Backends by device type: Gloo serves the CPU, NCCL (comm/nccl_backend.h) CUDA devices,
  // real or emulated, in builds that have it.
  void set_backend(DeviceType type, std::unique_ptr<Backend> backend);

 private:
  Backend& backend_for(const Tensor& t, const char* op);
  std::string describe(const char* op, const Tensor& t) const;
  std::shared_ptr<Work> with_timeout(std::shared_ptr<Work> w) const;
  // What a rank issues, as the check compares it; -1 where a field does not apply.
  struct Call {
    int64_t op, reduce, dtype, numel, root, device;
  };
  static Call call_of(Collective op, const Tensor& t, int64_t reduce, int64_t root);
  // Raises an ember::Error when the ranks disagree; `what`: this rank's collective, described.
  void check_agreement(const Call& call, const std::string& what);

  std::shared_ptr<Store> store_;
  int rank_, size_;
  ProcessGroupOptions options_;
  std::unique_ptr<Backend> cpu_, cuda_;
  std::atomic<int64_t> keys_{0};
  std::atomic<int64_t> checked_{0};  // collectives checked (check_collectives)
};

}  // namespace ember::comm
