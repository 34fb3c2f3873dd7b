// Text generation from a trained GPT (nanoGPT's generate): the logits of the last
// position divided by the temperature, all but the top-k set to -inf, a softmax, one token
// drawn. With the KV cache each new token costs one position's forward; without it the
// whole context (its last block_size tokens) runs again, as nanoGPT does. Once the context
// outgrows block_size the window slides and every position changes, so the cached path
// then runs the window again too: both paths compute the same logits, and the cache saves
// the work of the first block_size tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "core/random.h"
#include "examples/gpt/model.h"

namespace ember::examples::gpt {

struct SampleOptions {
  int64_t tokens = 0;
  double temperature = 1.0;
  int64_t top_k = 0;  // 0 (or more than the vocabulary): every token
  bool kv_cache = true;
};

// The prompt (at least one token) followed by the tokens drawn, with `gen` (one uniform
// draw on the CPU per token). The model runs in eval mode without gradients.
std::vector<int64_t> generate(GPT& model, const std::vector<int64_t>& prompt, const SampleOptions& o, Generator& gen);

}  // namespace ember::examples::gpt
