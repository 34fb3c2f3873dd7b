// The training driver shared by the Fashion-MNIST examples: the command-line flags every
// example takes (--help lists them), the epoch loop with a progress bar, evaluation, checkpoints with --save /
// --resume, and the final --json line.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ember.h"

namespace ember::examples {

struct TrainConfig {
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string device = "auto";
  bool data_on_device = false;  // the whole training set on the device
  int64_t epochs = 1;
  int64_t batch_size = 128;
  double lr = 1e-3;
  std::string optimizer = "adam";
  uint64_t seed = 1;
  int threads = 0;
  int64_t limit_train = 0;
  int64_t limit_test = 0;
  std::string save, resume;
  bool json = false;
  bool profile = false;
  std::string max_memory;        // budget beyond what training starts with, e.g. 64MiB or 50%
  bool auto_microbatch = false;  // split steps that run out of memory
  std::string memory_snapshot;   // snapshot of the first steps' memory, JSON (or .trace.json)
  int64_t memory_snapshot_steps = 3;  // the steps it covers; 0: the whole run
  std::string precision = "fp32";  // fp32, or bf16: bf16 compute with float32 weights
  int zero = 0;  // with several processes: 0 plain DDP, 1 or 2 the ZeRO stage (comm/zero.h)
};

void add_train_flags(CLI::App& app, TrainConfig& config);

// Trains the model `make_model` builds and prints one summary line per epoch; returns
// the process exit code. Errors are printed and give exit code 1.
int train_main(const std::string& model_name, const TrainConfig& config,
               const std::function<std::shared_ptr<nn::Module>()>& make_model);

}  // namespace ember::examples
