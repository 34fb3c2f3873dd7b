// Reading and writing the safetensors format (the files Python's `safetensors` opens):
// 8 bytes of little-endian header length, a JSON header, then the raw tensor data.
//
// Note [Tensor checksums]. ember writes the CRC-32C (core/checksum.h) of each tensor's
// bytes into the header's "__metadata__", as "crc32c:<tensor name>": "<8 hex digits>"
// (metadata values are strings, so Python's safetensors reads the file as before), and
// verifies them when it loads: a tensor whose bytes changed after the file was written
// (a flipped bit on disk, a truncated copy patched up, an edit) is refused by name. The
// checksums are not a signature: whoever can write the file can write matching ones.
// Files without them (other tools, ember before checksums) load unverified, and
// load_safetensors says so once per file on stderr. The keys are the loader's: they are
// not in SafetensorsFile::metadata, and save_safetensors refuses metadata keys that
// begin with "crc32c:".
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ember {

struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in the order of the data section
  std::map<std::string, std::string> metadata;          // the header's "__metadata__" (no checksums)
  bool checksummed = false;  // every tensor carried a checksum, and its bytes matched it
  // The tensor of that name; throws ember::Error naming the file's keys when absent.
  const Tensor& at(const std::string& name) const;
  bool contains(const std::string& name) const;
};

// Loads and validates a file: header length and JSON, dtypes (F64, F32, F16, BF16, I64,
// I32, U8, BOOL), shapes against data offsets, offsets inside the file and tiling it, and
// the tensors' checksums (Note [Tensor checksums]). Any problem is an ember::Error that
// names the file and what is wrong with it (and a damaged tensor by name).
SafetensorsFile load_safetensors(const std::string& path);
// The same from a file's bytes already in memory; `name` stands for the file in error
// messages. load_safetensors reads the file and calls this.
SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& name);

// Writes the tensors (copied to the CPU first) with their checksums, atomically, to the
// file `path` names (core/atomic_file.h: symlinks followed, mode kept; a crash leaves
// the old or the new file).
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace ember
