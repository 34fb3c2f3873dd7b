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

// --estimate-memory: the model built on the meta device, one step of `batch` samples per
// rank estimated and printed with the largest batch that fits, nothing allocated.
void print_memory_estimate(const TrainConfig& c, Device device, int64_t batch, int world,
                           const ModelFactory& make_model);

// The terms for `device`'s allocator. `held` is what the allocator held when training
// started (the datasets, the model); `cap_origin` says what set the cap ("" when none was).
memory::AdviceTerms advice_terms(const TrainConfig& c, Device device, int world, std::size_t held,
                                 const std::string& cap_origin, const ModelFactory& make_model);

}  // namespace ember::examples
