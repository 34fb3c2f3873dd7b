// The IDX format of (Fashion-)MNIST: a magic number (two zero bytes, a type code, the
// number of dims), big-endian uint32 dims, then the data. Read plain or gzip-compressed.
#pragma once

#include <string>

#include "core/tensor.h"

namespace ember::data {

// A uint8 tensor with the file's dims. Validates the magic number, the type (unsigned
// bytes only), the dims and that the data is exactly as long as they say; any problem is
// an ember::Error naming the file and what is wrong.
Tensor read_idx(const std::string& path);
// The same from the bytes of a file (plain or gzip) already in memory; `name` stands for
// the file in error messages. read_idx reads the file and calls this.
Tensor read_idx_bytes(const std::string& bytes, const std::string& name);

// Writes a uint8 tensor as IDX (gzip-compressed when gzip is true), atomically.
void write_idx(const std::string& path, const Tensor& t, bool gzip = false);

}  // namespace ember::data
