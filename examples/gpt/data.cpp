// The GPT example's text and batches (data.h).
#include "examples/gpt/data.h"

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "base/error.h"
#include "core/ops.h"

namespace ember::examples::gpt {

std::vector<int64_t> TextData::encode(const std::string& text) const {
  std::array<int64_t, 256> id;
  id.fill(-1);
  for (size_t i = 0; i < vocab.size(); ++i) id[static_cast<unsigned char>(vocab[i])] = static_cast<int64_t>(i);
  std::vector<int64_t> out;
  out.reserve(text.size());
  for (const char c : text) {
    const int64_t t = id[static_cast<unsigned char>(c)];
    EMBER_CHECK(t >= 0, "gpt: the character '", c, "' (byte ", static_cast<int>(static_cast<unsigned char>(c)),
                ") is not in the text's vocabulary");
    out.push_back(t);
  }
  return out;
}

std::string TextData::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (const int64_t t : ids) {
    EMBER_CHECK(t >= 0 && t < vocab_size(), "gpt: token ", t, " is outside the vocabulary of ", vocab_size());
    out += vocab[static_cast<size_t>(t)];
  }
  return out;
}

std::string load_text(const std::string& path) {
  if (!path.empty()) {
    std::error_code ec;
    EMBER_CHECK(!std::filesystem::is_directory(path, ec), "gpt: --data ", path, " is a folder; it takes a text file");
    std::ifstream in(path, std::ios::binary);
    EMBER_CHECK(in, "gpt: --data: cannot read ", path, " (", std::strerror(errno), ")");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EMBER_CHECK(!in.bad(), "gpt: --data: cannot read ", path, " (", std::strerror(errno), ")");
    return text;
  }
  FILE* p = ::popen(kBibleCommand, "r");
  EMBER_CHECK(p, "gpt: cannot run '", kBibleCommand, "' (", std::strerror(errno), ")");
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  const int status = ::pclose(p);
  EMBER_CHECK(status == 0 && !text.empty(), "gpt: --data not given, and '", kBibleCommand,
              "' failed: install Debian's bible-kjv package, or pass --data FILE with any text");
  return text;
}

TextData make_text_data(const std::string& text, int64_t block_size) {
  std::array<bool, 256> seen{};
  for (const char c : text) seen[static_cast<unsigned char>(c)] = true;
  TextData d;
  for (int c = 0; c < 256; ++c)
    if (seen[static_cast<size_t>(c)]) d.vocab += static_cast<char>(c);
  const std::vector<int64_t> ids = d.encode(text);
  const size_t n = ids.size() * 9 / 10;
  d.train.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n));
  d.val.assign(ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end());
  EMBER_CHECK(static_cast<int64_t>(d.val.size()) > block_size, "gpt: --data: the text has ", ids.size(),
              " characters; its validation tenth needs more than --block-size ", block_size);
  return d;
}

std::pair<Tensor, Tensor> get_batch(const std::vector<int64_t>& data, int64_t batch, int64_t T, Generator& gen,
                                    Device device, int rank, int world) {
  const auto size = static_cast<int64_t>(data.size());
  const std::vector<int64_t> offsets =
      randint(0, size - T, {batch}, {kInt64, Device::cpu()}, &gen).to_vector<int64_t>();
  const int64_t first = batch * rank / world, rows = batch * (rank + 1) / world - first;
  Tensor x = empty({rows, T}, {kInt64, Device::cpu()}), y = empty({rows, T}, {kInt64, Device::cpu()});
  auto* px = static_cast<int64_t*>(x.data_ptr());
  auto* py = static_cast<int64_t*>(y.data_ptr());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t* src = data.data() + offsets[static_cast<size_t>(first + r)];
    std::memcpy(px + r * T, src, static_cast<size_t>(T) * sizeof(int64_t));
    std::memcpy(py + r * T, src + 1, static_cast<size_t>(T) * sizeof(int64_t));
  }
  if (device.is_cpu()) return {x, y};
  return {x.to(device), y.to(device)};
}

}  // namespace ember::examples::gpt
