// The GPT example's text: characters as tokens, nanoGPT's shakespeare_char prepare.py on
// another text. By default the King James Version as Debian's bible-kjv prints it
// (`bible -l80 gen1:1-rev22:21`, 4.3 MB, a tenth of a second; the fixed line width makes
// it the same text whatever the terminal), or any file (--data). The vocabulary is the
// text's distinct bytes in increasing order; the first 90% is training text, the rest
// validation. Batches are nanoGPT's get_batch: B random windows of T + 1 tokens.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace ember::examples::gpt {

// The command that prints the default text.
inline constexpr const char* kBibleCommand = "bible -l80 gen1:1-rev22:21";

struct TextData {
  std::string vocab;  // token i is the byte vocab[i]
  std::vector<int64_t> train, val;

  int64_t vocab_size() const { return static_cast<int64_t>(vocab.size()); }
  // Token ids of `text`; a byte outside the vocabulary is an ember::Error naming it.
  std::vector<int64_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int64_t>& ids) const;
};

// `path`'s bytes, or with an empty path the output of kBibleCommand (an ember::Error if it
// fails, saying to install bible-kjv or pass --data).
std::string load_text(const std::string& path);
// The vocabulary and the 90/10 split of `text`; each part must hold more than block_size
// tokens (an ember::Error saying so otherwise).
TextData make_text_data(const std::string& text, int64_t block_size);

// nanoGPT's get_batch: `batch` offsets drawn uniformly from [0, size - T) with `gen` (on
// the CPU, so the same on every device), x [batch, T] the windows and y the windows one
// token on. Of the batch, this rank takes rows [rank * batch / world, (rank + 1) * batch /
// world): ranks of one step draw the same offsets, so world processes see one process's
// batch. Returns int64 tensors on `device`.
std::pair<Tensor, Tensor> get_batch(const std::vector<int64_t>& data, int64_t batch, int64_t T, Generator& gen,
                                    Device device, int rank = 0, int world = 1);

}  // namespace ember::examples::gpt
