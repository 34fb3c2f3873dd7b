// The memory a training step will need, from a dry run on the meta device (core/meta.h).
//
// memory_estimate() runs the examples' training step (forward, cross entropy with int64
// targets, backward, optimizer step) twice on meta tensors: the first step creates the
// optimizer's state, the second has it live from start to end, as every later step. The
// meta device's caching allocator has the real devices' policy, and conv2d's kernel
// scratch on the target device is allocated too (core/kernel_scratch.h), so its peak
// allocated bytes over the two steps is what the target device's allocator reports for a
// real run. Nothing is computed and nothing is allocated on a real device; a step of the
// examples' models takes about a millisecond.
//
// Per module (dotted names as in state_dict; "" is the model itself):
//   parameters, gradients, optimizer_state  the allocator's blocks for its own parameters,
//                                    their gradients and the optimizer's buffers
//   activations                      what its forward allocated and is still live when the
//                                    forward ends: saved for backward (and the output)
//   peak                             the most its forward or backward allocated beyond
//                                    what was live when it began (children included)
// Backward's allocations are charged to the module whose forward recorded the autograd
// node; what no module made (the batch, the loss, the optimizer's temporaries) goes to
// the row "(outside modules)".
//
// Sharding (ZeRO): with optimizer_state_shards = N each parameter's optimizer buffers
// take ceil(numel / N) elements per rank, and likewise gradients with gradient_shards; a
// row's bytes are those, rounded as the allocator rounds them. The step peak is the
// unsharded peak less the bytes sharding saves, assuming the gradients and the state are
// live at the peak (so it is a slight underestimate when the peak falls early in backward).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ember::nn { class Module; }

namespace ember::optim {

struct MemoryEstimateOptions {
  Device target = Device::cpu();    // the device whose allocator is modelled (CPU or CUDA)
  std::optional<DType> autocast{};  // kBFloat16: the forward under AutocastScope, as --precision bf16
  bool checkpoint = false;          // the model (a Sequential) checkpointed as nn::checkpoint_blocks does
  int64_t micro_batch = 0;          // pieces of this many samples, gradients accumulated; 0: one piece
  std::string optimizer = "adam";   // sgd (with momentum), adam or adamw
  int64_t optimizer_state_shards = 1;
  int64_t gradient_shards = 1;
  // A language model's step: the input is int64 token ids [batch, T], the targets token
  // ids of the same shape, and the loss the cross entropy of the logits [batch, T, V]
  // taken as [batch * T, V] (examples/gpt).
  bool token_inputs = false;
};

struct ModuleMemory {
  std::string name;  // dotted; "" is the model, "(outside modules)" what no module made
  std::string type;  // Module::name(), e.g. "Linear(in_features=784, ...)"
  int64_t parameters = 0, gradients = 0, optimizer_state = 0, activations = 0, peak = 0;
};

struct MemoryEstimate {
  std::vector<ModuleMemory> modules;  // in the model's order, then "(outside modules)"
  int64_t batch = 0;
  Device target;
  int64_t parameters = 0, gradients = 0, optimizer_state = 0, activations = 0;  // totals
  int64_t step_peak_bytes = 0;           // the allocator's peak allocated bytes over the step
  int64_t step_peak_reserved_bytes = 0;  // its peak reserved bytes (segments), unsharded

  // A table, one row per module that holds memory, with totals.
  std::string str() const;
  // One JSON object: estimated_step_peak_bytes, batch, device and "modules": [{name,
  // type, parameters, gradients, optimizer_state, activations, peak}, ...].
  std::string json() const;
};

// The estimate for a batch of `input_shape` (its first dim is the batch) of float32
// inputs (token ids with options.token_inputs). `model` must be on the meta device (build it there: set_default_device, or
// Module::to(Device::meta())); its parameters stay there.
MemoryEstimate memory_estimate(nn::Module& model, const Shape& input_shape, const MemoryEstimateOptions& options = {});

// The largest batch (at most 2^24) whose estimated step peak allocates no more than
// `capacity` bytes, by binary search over estimates (memory grows with the batch); 0 when
// not even one sample fits. Allocated, not reserved: the reserved peak is unsharded, so
// leave the cache's fragmentation as headroom (docs/memory.md: reserved / allocated 1.035).
int64_t max_batch_that_fits(nn::Module& model, const Shape& input_shape, std::size_t capacity,
                            const MemoryEstimateOptions& options = {});

}  // namespace ember::optim
