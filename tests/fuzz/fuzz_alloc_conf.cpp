// Fuzzes the EMBER_ALLOC_CONF parser; a parsed config must also survive str() and parse
// back to the same string (the round trip the allocator's reports rely on).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "memory/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using ember::memory::AllocatorConfig;
  AllocatorConfig c;
  try {
    c = AllocatorConfig::parse(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const ember::Error&) {
    return 0;
  }
  const std::string s = c.str();
  if (AllocatorConfig::parse(s).str() != s) std::abort();
  return 0;
}
