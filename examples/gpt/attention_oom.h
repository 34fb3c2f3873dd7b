// What ember_gpt adds to an out-of-memory report: the attention's part and the context
// length that would fit. At a long context the attention is what runs out: the math
// path makes the B·H·T² scores and keeps each layer's probabilities for backward, the
// fused path keeps one log-sum-exp per row (docs/attention.md). The allocator's report
// (memory/oom.h) names the largest live tensors and the largest batch that fits; this
// note says which attention path ran, what its scores cost per layer, the step's estimate
// on each path, and the largest --block-size whose step fits under the cap at this batch,
// from the memory estimate (--estimate-memory's dry run on the meta device).
#pragma once

#include <cstddef>
#include <cstdint>

#include "examples/common/memory_advice.h"
#include "examples/gpt/model.h"
#include "memory/oom.h"

namespace ember::examples::gpt {

struct AttentionOomContext {
  const TrainConfig* common = nullptr;
  GPTConfig model;
  Device device;
  int world = 1;
  int64_t batch = 0;      // per rank
  std::size_t held = 0;   // reserved when training started (the cap's base)
};

// The report of `e` with the attention note added to its notes.
OutOfMemoryError with_attention_note(const OutOfMemoryError& e, const AttentionOomContext& ctx);

}  // namespace ember::examples::gpt
