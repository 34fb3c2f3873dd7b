// Memory over time, drawn from an allocator snapshot (memory/export.h's JSON): stacked
// areas of live allocated bytes per op, the reserved bytes as a line, the peak marked.
#pragma once

#include <string>

namespace ember::tools {

struct MemvizOptions {
  int width = 1200, height = 520;  // of the plot area, in pixels: 100 to 20000 each
  int top_ops = 8;                 // ops drawn on their own (0 to 64); the rest is "other"
  bool baseline = true;            // draw what was allocated before the history began
};
inline constexpr int kMinPlotSize = 100, kMaxPlotSize = 20000, kMaxTopOps = 64;

// The SVG document for a snapshot's JSON text. Throws ember::Error when an option is out of
// its range, or the JSON is not a snapshot or has no history (record it with record_memory_history or
// EMBER_MEMORY_HISTORY=N).
std::string render_memory_svg(const std::string& snapshot_json, const MemvizOptions& options = {});

}  // namespace ember::tools
