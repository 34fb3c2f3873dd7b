// Fuzzes the safetensors reader: an ember::Error is the answer to bad bytes; anything
// else (a crash, a sanitizer report, an nlohmann::json exception) is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/error.h"
#include "core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    ember::parse_safetensors(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const ember::Error&) {
  }
  return 0;
}
