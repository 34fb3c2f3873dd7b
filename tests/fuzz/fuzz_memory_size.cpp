// Fuzzes parse_memory_size (--max-memory): bytes, a size with a unit or a share of the
// device. An ember::Error is the answer to bad text; a result is at least one byte.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "core/memory.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    if (ember::parse_memory_size(std::string(reinterpret_cast<const char*>(data), size)) < 1) std::abort();
  } catch (const ember::Error&) {
  }
  return 0;
}
