// ember-memviz: an allocator snapshot (JSON, from save_memory_snapshot or the examples'
// --memory-snapshot) drawn as an SVG of memory over time by op.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "base/error.h"
#include "base/program.h"
#include "core/atomic_file.h"
#include "tools/memviz/memviz.h"

int main(int argc, char** argv) {
  return ember::run_program("ember-memviz", [&] {
    using namespace ember::tools;
    CLI::App app{"ember-memviz: draw a memory snapshot's history as an SVG of memory over time by op"};
    app.failure_message(ember::cli_failure_message);
    std::string in, out = "memory.svg";
    MemvizOptions opt;
    app.add_option("snapshot", in, "snapshot JSON (with a history)")->required();
    app.add_option("-o,--output", out, "SVG to write (the file a symlink names)")->capture_default_str();
    app.add_option("--top", opt.top_ops, "ops drawn on their own; the rest is 'other'")
        ->check(CLI::Range(0, kMaxTopOps).description(""))
        ->type_name("INT in [0, " + std::to_string(kMaxTopOps) + "]")
        ->capture_default_str();
    app.add_option("--width", opt.width, "plot width in pixels")
        ->check(CLI::Range(kMinPlotSize, kMaxPlotSize).description(""))
        ->type_name("INT in [" + std::to_string(kMinPlotSize) + ", " + std::to_string(kMaxPlotSize) + "]")
        ->capture_default_str();
    bool no_baseline = false;
    app.add_flag("--no-baseline", no_baseline, "leave out what was allocated before the history began (a dataset)");
    CLI11_PARSE(app, argc, argv);
    opt.baseline = !no_baseline;
    ember::check_can_write(out, "memviz: --output");  // before the drawing: a bad path fails first
    ember::write_file_atomically(out, render_memory_svg(ember::read_file(in, "memviz"), opt), "memviz");
    std::printf("wrote %s\n", out.c_str());
    return 0;
  });
}
