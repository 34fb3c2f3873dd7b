// The examples' memory estimate (--estimate-memory) and what out-of-memory reports say in
// their words: the flags a user types (--max-memory, --auto-microbatch, --checkpoint,
// --precision bf16, --batch-size) rather than the C++ names, the remedies not in use yet,
// and the largest --batch-size that fits the cap in force, from the memory estimate
// (memory/oom.h's AdviceTerms; memory/ itself knows nothing of the examples).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ember.h"
#include "examples/common/flags.h"

namespace ember::examples {

using ModelFactory = std::function<std::shared_ptr<nn::Module>()>;

// One sample of the model's input: a float32 image [1, S, S] (the Fashion-MNIST examples,
// S = --image-size), or int64 token ids [T] (examples/gpt: the model then checkpoints
// itself, and the loss is over every position).
struct SampleInput {
  Shape shape;
  bool tokens = false;
};
inline SampleInput image_sample(const TrainConfig& c) { return {{1, c.image_size, c.image_size}}; }

// --estimate-memory: the model built on the meta device, one step of `batch` samples per
// rank estimated and printed with the largest batch that fits, nothing allocated.
void print_memory_estimate(const TrainConfig& c, Device device, int64_t batch, int world,
                           const ModelFactory& make_model, const SampleInput& sample);

// The estimate of one training step of `batch` samples per rank, as --estimate-memory
// makes it (the model built on the meta device; nothing allocated on `device`).
optim::MemoryEstimate estimate_step(const TrainConfig& c, Device device, int world, const ModelFactory& make_model,
                                    const SampleInput& sample, int64_t batch);

// The terms for `device`'s allocator. `held` is what the allocator held when training
// started (the datasets, the model); `cap_origin` says what set the cap ("" when none was).
memory::AdviceTerms advice_terms(const TrainConfig& c, Device device, int world, std::size_t held,
                                 const std::string& cap_origin, const ModelFactory& make_model,
                                 const SampleInput& sample);

}  // namespace ember::examples
