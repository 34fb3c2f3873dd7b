// ZeroOptimizer: ZeRO stages 1 and 2 over DistributedDataParallel's gradient buckets.
//
// Note [ZeRO]. Each DDP bucket is one flat buffer, zero-padded to a multiple of the
// world size N and cut into N equal shards; rank r owns shard r of every bucket (so every
// rank owns 1/N of each bucket, uneven parameter sizes included, and the buckets keep
// their order and their overlap with backward). The optimizer the user chose (the
// `make_inner` factory: SGD, Adam, AdamW) runs on one flat tensor per bucket, this
// rank's shard of the parameters, with the fused update ops, so its state (momentum,
// Adam's moments) exists for 1/N of the parameters only. After the update each bucket's
// shards are all-gathered and copied into the parameters, so every rank holds the full,
// updated model. The update is elementwise, so it equals unsharded DDP's.
//   Stage 1: buckets are all-reduced as in plain DDP; each rank reads its shard of them.
//   Stage 2: buckets are reduce-scattered into per-rank gradient shards, and the full
//   bucket buffers exist only from a bucket's first gradient to the end of its
//   exchange: after backward the parameters hold no gradient, only the shards remain.
// Checkpoints hold the full, unsharded state in the usual optimizer format (keys
// state.<parameter>.<buffer>), so they load into a ZeroOptimizer at any world size or
// into a plain optimizer. Gathering it is a collective: consolidate_state_dict() on
// every rank, then state_dict() (save_checkpoint) where you like, as with PyTorch's
// ZeroRedundancyOptimizer.
//
// Why an optimizer that drives DDP rather than a DDP option: the shards are the
// optimizer's state and the user already chooses the optimizer; PyTorch's
// ZeroRedundancyOptimizer reads the same way. Stage 2 needs DDP's buckets to
// reduce-scatter, which the ZeroOptimizer asks of the DDP it is given.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/ddp.h"
#include "optim/optimizer.h"

namespace ember::comm {

class ZeroOptimizer : public optim::Optimizer {
 public:
  // Builds the per-rank optimizer over the flat shards, e.g.
  //   [](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(p, optim::Adam::Options{}); }
  using Factory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor> shards)>;

  // stage: 1 (optimizer state sharded) or 2 (gradients too). Make it on every rank, after
  // the DDP and before the first backward.
  ZeroOptimizer(DistributedDataParallel& ddp, int stage, const Factory& make_inner);
  ~ZeroOptimizer() override;
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  // Collective: gathers the full state on every rank for state_dict().
  void consolidate_state_dict();
  // The full state gathered by the last consolidate_state_dict() (or loaded); an
  // ember::Error if a step ran since.
  NamedTensors state_dict() const override;
  // A full state (of this optimizer or of the unsharded one); keeps this rank's shards.
  void load_state_dict(const NamedTensors& state) override;

  int stage() const { return stage_; }
  // Bytes of optimizer state on this rank, and what unsharded DDP keeps on each rank.
  int64_t state_bytes() const override;
  int64_t full_state_bytes() const;
  // Bytes of gradients kept on this rank after backward, and unsharded DDP's.
  int64_t gradient_bytes() const;
  int64_t full_gradient_bytes() const;
  // "ZeRO-1 over 4 ranks: optimizer state on this rank 1.00 MiB of 4.00 MiB unsharded, ...".
  // The device's memory_summary() and OutOfMemoryError reports end with it while this
  // optimizer lives.
  std::string memory_summary() const;

 protected:
  // step(): waits for the gradient exchange, updates this rank's shards, all-gathers the
  // parameters.
  void update() override;
  std::vector<std::string> buffer_names() const override { return {}; }

 private:
  struct Bucket {
    std::vector<size_t> params;   // indices into params_
    std::vector<int64_t> offset;  // of each parameter in the flat bucket
    int64_t shard = 0;            // elements per rank (padded bucket / world size)
  };
  // Elements of the full state or of the parameters -> flat shard positions of bucket b.
  Tensor gather_bucket(size_t b, const Tensor& shard) const;

  DistributedDataParallel& ddp_;
  ProcessGroup& pg_;
  int stage_;
  std::vector<Bucket> buckets_;
  std::vector<Tensor> shards_;                      // this rank's parameter shard per bucket
  std::shared_ptr<std::vector<Tensor>> grad_shards_;  // stage 2: reduce-scatter targets
  std::shared_ptr<std::vector<bool>> fresh_;        // stage 2: the bucket's shard holds this step's gradient
  std::unique_ptr<optim::Optimizer> inner_;
  NamedTensors consolidated_;  // per-parameter state (no lr/step)
  int64_t consolidated_at_ = 0;  // steps_ when it was gathered or loaded
  // inner_'s state bytes, refreshed by step() and load_state_dict(): the report note runs
  // on whichever thread reports, under the allocator's lock, and reads only this.
  std::atomic<int64_t> state_bytes_{0};
  Device device_;
  int note_ = 0;  // the device allocator's report note
};

}  // namespace ember::comm
