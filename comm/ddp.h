// DistributedDataParallel: one model replica per rank, gradients averaged over ranks as
// backward produces them.
//
// Note [DDP step]. Construction checks that every rank has the same parameters and
// buffers (names, shapes, dtypes; an error names the first difference and the rank),
// then copies rank 0's values to every rank (buffers only then: batch norm's running
// statistics evolve on each rank from its own shards; rank 0's are the ones saved).
// Parameters are grouped into buckets in reverse registration order (roughly the order
// backward produces their gradients): one dtype and device per bucket, the first bucket
// closed at first_bucket_bytes (1 MiB, so the first all-reduce starts early), the
// others at bucket_cap_bytes (25 MiB). Each bucket is one flat buffer. During backward
// a post-accumulate hook copies a parameter's gradient into its slot in the buffer (the
// one copy) and makes grad() a view of that slot; when a bucket and every bucket before
// it are complete, its all-reduce (average) is issued at once, so the exchange of late
// layers' gradients overlaps the backward of early layers. The last gradient waits for
// every bucket: when backward() returns, every grad() holds the average over ranks and
// the optimizer step can run as is.
//
// Gradient accumulation: inside no_sync() backward passes only accumulate locally; the
// next backward outside it exchanges the sum. For the MicroBatcher (several backward
// calls per step), run it inside no_sync() and call sync_gradients() after it.
// A parameter that gets no gradient in an iteration is an error naming it at the next
// forward() or synchronize(), unless find_unused_parameters: then forward() walks the
// graph from its output, and the parameters it does not reach count as ready at once,
// with the gradient they hold from no_sync() passes or zeros (the bucket holding them
// still takes part, so all ranks issue the same collectives).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "layers/module.h"

namespace ember::comm {

// Reduces one bucket (a flat, contiguous tensor) in place to the average over ranks.
using CommHook = std::function<std::shared_ptr<Work>(ProcessGroup& pg, const Tensor& bucket)>;
// The default: all_reduce(avg).
std::shared_ptr<Work> allreduce_hook(ProcessGroup& pg, const Tensor& bucket);
// Sends bfloat16 (half the bytes; about 3 significant digits), averages, writes back.
std::shared_ptr<Work> bf16_compress_hook(ProcessGroup& pg, const Tensor& bucket);

struct DdpOptions {
  int64_t bucket_cap_bytes = int64_t(25) << 20;
  int64_t first_bucket_bytes = int64_t(1) << 20;
  bool find_unused_parameters = false;
  CommHook comm_hook = allreduce_hook;
};

// Parameter indices (registration order) per bucket, in the buckets' all-reduce order
// (Note [DDP step]).
std::vector<std::vector<size_t>> assign_buckets(const std::vector<Tensor>& params, int64_t first_bucket_bytes,
                                                int64_t bucket_cap_bytes);

// For MicroBatchOptions::agree: the smallest proposal over all ranks (one all-reduce).
std::function<int64_t(int64_t)> min_over_ranks(std::shared_ptr<ProcessGroup> pg);

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> pg,
                          DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // The module's forward; checks that the previous iteration's exchange completed.
  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  // Waits until this iteration's gradients are averaged (at once when backward already
  // finished the exchange). Call it before optimizer.step() when some parameters may have
  // no gradient; a parameter without one is an error naming it (see find_unused_parameters).
  void synchronize();

  // Exchanges the gradients the parameters hold now, whole (no overlap): after local
  // accumulation under no_sync(), as with the MicroBatcher. Parameters without a
  // gradient are an error, or zeros with find_unused_parameters.
  void sync_gradients();

  // While a NoSync lives, backward passes accumulate locally and exchange nothing.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
  };
  NoSync no_sync() { return NoSync(*this); }

  nn::Module& module() { return *module_; }
  ProcessGroup& process_group() { return *pg_; }
  // Parameter indices per bucket, in all-reduce order.
  std::vector<std::vector<size_t>> buckets() const;
  // For the last exchange, per bucket in issue order: how many gradient hooks had run
  // when its all-reduce was issued (fewer than the parameter count: it overlapped backward).
  std::vector<int64_t> launch_log() const;

  // For ZeroOptimizer (comm/zero.h; Note [ZeRO]). Call before the first backward.
  struct Sharding {
    int64_t pad_to = 1;  // each bucket's buffer is zero-padded to a multiple of this many elements
    // Replaces comm_hook when set: exchanges bucket `b` (its padded flat buffer).
    std::function<std::shared_ptr<Work>(size_t b, const Tensor& buffer)> exchange;
    // Stage 2: a bucket's buffer exists from its first gradient until its exchange is
    // issued (the collective holds it until done); parameters then hold no gradient
    // (exchange keeps what this rank needs).
    bool release_buffers = false;
  };
  void set_sharding(Sharding s);
  // The flat, padded gradient buffer of each bucket (undefined when released).
  std::vector<Tensor> bucket_buffers() const;

  struct Impl;  // comm/ddp.cpp

 private:
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> pg_;
  std::shared_ptr<Impl> impl_;
};

}  // namespace ember::comm
