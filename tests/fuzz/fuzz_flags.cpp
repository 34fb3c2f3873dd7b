// Fuzzes the examples' command line (examples/common/flags.h): the input, split at NUL
// bytes, is argv after the program name, parsed as ember_mlp and ember_cnn parse theirs.
// A CLI11 parse error or an ember::Error is the answer to bad flags; anything else is a
// bug. Two properties beside "no crash": a command line that parses passes
// check_train_config (the validators and the check apply the same ranges, Note [Flag
// ranges]), and EMBER_NUM_THREADS's parser either refuses a value or returns a count of
// 1 to the cores.
#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "examples/common/flags.h"
#include "kernels/cpu/parallel.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> args = {"ember_fuzz"};
  for (size_t start = 0; start <= text.size() && args.size() < 33;) {
    const size_t end = std::min(text.find('\0', start), text.size());
    args.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());

  CLI::App app;
  ember::examples::TrainConfig config;
  ember::examples::add_train_flags(app, config);
  ember::examples::add_image_size_flag(app, config);
  bool parsed = false;
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
    parsed = true;
  } catch (const CLI::ParseError&) {
  }
  if (parsed) {
    try {
      ember::examples::check_train_config(config);
    } catch (const ember::Error&) {
      std::abort();  // parsed, yet out of range: the two checks disagree
    }
  }
  try {
    const int n = ember::kernels::cpu::parse_num_threads(args[1]);
    if (n < 1 || n > static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))) std::abort();
  } catch (const ember::Error&) {
  }
  return 0;
}
