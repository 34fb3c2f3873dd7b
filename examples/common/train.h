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
  bool cuda_graph = false;      // capture the training step once, replay it per batch (graph_step.h)
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
  int64_t image_size = 28;         // the images are resized to this many pixels a side
  bool checkpoint = false;         // activation checkpointing by blocks (nn::checkpoint_blocks)
  bool estimate_memory = false;    // print the memory estimate of a step and exit
  std::string device_memory;       // the capacity the estimate fits the batch to; default: the device's
  double prune = 0;  // after training: prune this share, fine-tune an epoch, run sparse (CSR)
  int zero = 0;  // with several processes: 0 plain DDP, 1 or 2 the ZeRO stage (comm/zero.h)
  bool tf32 = false;  // float32 GEMMs and convolutions on CUDA may use TF32 (set_allow_tf32)
};

// Makes stdout line-buffered, into a pipe (ember-run's) too: a rank stopped because another
// failed has then written every line it printed. Call it first in main, before any output.
void line_buffered_stdout();

void add_train_flags(CLI::App& app, TrainConfig& config);
// --image-size, for the models whose input size follows it (the CNN).
void add_image_size_flag(CLI::App& app, TrainConfig& config);

// Trains the model `make_model` builds (on the default device, which it may set) and
// prints one summary line per epoch; returns the process exit code. Errors are printed
// and give exit code 1. With --estimate-memory it builds the model on the meta device,
// prints the estimate (optim/memory_estimate.h) and returns, before any allocation.
int train_main(const std::string& model_name, const TrainConfig& config,
               const std::function<std::shared_ptr<nn::Module>()>& make_model);

}  // namespace ember::examples
