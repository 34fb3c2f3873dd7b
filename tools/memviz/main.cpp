// ember-memviz: an allocator snapshot (JSON, from save_memory_snapshot or the examples'
// --memory-snapshot) drawn as an SVG of memory over time by op.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "core/atomic_file.h"
#include "tools/memviz/memviz.h"

int main(int argc, char** argv) {
  CLI::App app{"ember-memviz: draw a memory snapshot's history as an SVG of memory over time by op"};
  std::string in, out = "memory.svg";
  ember::tools::MemvizOptions opt;
  app.add_option("snapshot", in, "snapshot JSON (with a history)")->required();
  app.add_option("-o,--output", out, "SVG to write")->capture_default_str();
  app.add_option("--top", opt.top_ops, "ops drawn on their own; the rest is 'other'")->capture_default_str();
  app.add_option("--width", opt.width, "plot width in pixels")->capture_default_str();
  bool no_baseline = false;
  app.add_flag("--no-baseline", no_baseline, "leave out what was allocated before the history began (a dataset)");
  CLI11_PARSE(app, argc, argv);
  opt.baseline = !no_baseline;
  try {
    std::ifstream f(in);
    EMBER_CHECK(f, "memviz: cannot read '", in, "'");
    std::stringstream ss;
    ss << f.rdbuf();
    ember::write_file_atomically(out, ember::tools::render_memory_svg(ss.str(), opt), "memviz");
    std::printf("wrote %s\n", out.c_str());
  } catch (const ember::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
