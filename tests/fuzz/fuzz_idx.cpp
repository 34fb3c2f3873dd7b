// Fuzzes the IDX reader (plain and gzip): an ember::Error is the answer to bad bytes;
// anything else (a crash, a sanitizer report, another exception) is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/error.h"
#include "data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    ember::data::read_idx_bytes(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const ember::Error&) {
  }
  return 0;
}
