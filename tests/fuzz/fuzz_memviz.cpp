// Fuzzes ember-memviz's snapshot reader and drawing: an ember::Error is the answer to a
// bad snapshot; anything else (a crash, a sanitizer report, an nlohmann::json exception)
// is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/error.h"
#include "tools/memviz/memviz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ember::tools::MemvizOptions opt;
  opt.width = 64;  // the drawing's cost grows with the width; the logic does not
  try {
    ember::tools::render_memory_svg(std::string(reinterpret_cast<const char*>(data), size), opt);
  } catch (const ember::Error&) {
  }
  return 0;
}
