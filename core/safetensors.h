// Reading and writing the safetensors format (the files Python's `safetensors` opens):
// 8 bytes of little-endian header length, a JSON header, then the raw tensor data.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ember {

struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in the order of the data section
  std::map<std::string, std::string> metadata;          // the header's "__metadata__"
  // The tensor of that name; throws ember::Error naming the file's keys when absent.
  const Tensor& at(const std::string& name) const;
  bool contains(const std::string& name) const;
};

// Loads and validates a file: header length and JSON, dtypes (F64, F32, F16, BF16, I64,
// I32, U8, BOOL), shapes against data offsets, offsets inside the file and tiling it.
// Any problem is an ember::Error that names the file and what is wrong with it.
SafetensorsFile load_safetensors(const std::string& path);
// The same from a file's bytes already in memory; `name` stands for the file in error
// messages. load_safetensors reads the file and calls this.
SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& name);

// Writes CPU tensors atomically: a temporary file beside `path`, fsync, then rename,
// so a crash never leaves a half-written file in its place.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace ember
