// What the ports of PyTorch's examples share in their main(): the house's flags as far as
// they apply to a port (DESIGN.md's command-line conventions: --device, --threads, --seed,
// --epochs, --batch-size, --lr, --data, --limit-train, --limit-test; each numeric one with
// its range in --help) plus the originals' --dry-run and --check-flags (parse, check, exit),
// and Fashion-MNIST standing in for MNIST. The models themselves are in each folder's
// model.h, written as the originals.
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/program.h"
#include "examples/common/flags.h"
#include "data/dataset.h"
#include "ember.h"

namespace ember::pt {

struct Flags {
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string device = "auto";
  int64_t epochs = 1;
  int64_t batch_size = 64;
  double lr = 1e-3;
  uint64_t seed = 1;
  int threads = 0;          // 0: EMBER_NUM_THREADS, else all cores
  int64_t limit_train = 0;  // 0: all
  int64_t limit_test = 0;   // 0: all
  bool dry_run = false;     // one batch of training and one of testing
  bool check_flags = false;  // check the flags and the device, then exit (main returns after setup)
};

// Adds the flags, their defaults being `f`'s (the original's).
inline void add_flags(CLI::App& app, Flags& f, bool with_data = true) {
  if (with_data) app.add_option("--data", f.data, "folder of the Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--device", f.device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  // The ranges are the training examples' (Note [Flag ranges] in examples/common/flags.h).
  using examples::with_train_range;
  with_train_range(app.add_option("--epochs", f.epochs, "training epochs"), "INT")->capture_default_str();
  with_train_range(app.add_option("--batch-size", f.batch_size, "samples per training step"), "INT")
      ->capture_default_str();
  with_train_range(app.add_option("--lr", f.lr, "learning rate"), "FLOAT")->capture_default_str();
  with_train_range(app.add_option("--seed", f.seed, "seed of the initial weights and the shuffling"), "INT")
      ->capture_default_str();
  with_train_range(
      app.add_option("--threads", f.threads, "CPU threads, at most the cores (default: EMBER_NUM_THREADS or all cores)"),
      "INT");
  if (with_data) {
    with_train_range(app.add_option("--limit-train", f.limit_train, "train on the first N samples only (default: all)"),
                     "INT");
    with_train_range(app.add_option("--limit-test", f.limit_test, "test on the first N samples only (default: all)"),
                     "INT");
  }
  app.add_flag("--dry-run", f.dry_run, "one batch of training (and of testing), as the original's --dry-run");
  // What tests/examples/test_hostile_values.cpp gives the ports that have no data folder
  // to stop at, so that an accepted value ends the run before any training.
  app.add_flag("--check-flags", f.check_flags, "check the flags and the device, then exit before loading data");
}

// The range check of a port's own FLOAT option. CLI::Range alone lets NaN through (no
// comparison with it is true); this refuses NaN, infinities and non-numbers first, as the
// house flags do (Note [Flag ranges] in examples/common/flags.h).
inline CLI::Validator finite_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || !std::isfinite(v)) return "'" + text + "' is not a finite number";
        if (v < lo || v > hi)
          return ember::detail::str("'", text, "' is not in [", lo, ", ", hi, "]");
        return "";
      },
      "");
}

// Threads, seed and device, as the flags say; returns the device.
inline Device setup(const Flags& f) {
  if (f.threads > 0) set_num_threads(f.threads);
  manual_seed(f.seed);
  std::string device = f.device == "auto" ? default_device_name() : f.device;
  const Device dev = Device::parse(device);
  set_default_device(dev);
  std::printf("device %s, %d CPU thread(s)\n", dev.str().c_str(), get_num_threads());
  return dev;
}

// Fashion-MNIST (the originals' MNIST is not on this machine; same format and shapes),
// cut to --limit-train / --limit-test.
inline data::TensorDataset fashion_mnist(const Flags& f, bool train) {
  data::TensorDataset d = data::load_fashion_mnist(f.data, train);
  const int64_t limit = train ? f.limit_train : f.limit_test;
  return limit > 0 && limit < d.size() ? d.head(limit) : d;
}

// Fashion-MNIST's mean and standard deviation of the training pixels, where the originals
// normalize with MNIST's (0.1307, 0.3081).
inline constexpr double kFashionMean = 0.2860, kFashionStd = 0.3530;

}  // namespace ember::pt
