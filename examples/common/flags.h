// The training examples' command line: TrainConfig, the flags that fill it (--help lists
// them, each numeric one with its range), and the check of their values.
//
// Note [Flag ranges]. Every numeric flag has a range, kept once in flags.cpp's table and
// applied twice: by a validator on the flag, so that a bad value stops the program while
// its command line is parsed (CLI11's exit status 105, one line naming the flag, the value
// and the range), and by check_train_config at the start of train_main, for a TrainConfig
// built in code. --help shows each range as "INT in [lo, hi]" (tests/examples parse it).
// A range says what makes sense, not only what fits the type: --threads stops at the
// cores (more threads than cores only wait for each other), --lr at 1000, --epochs at
// 10^6. Non-numbers, NaN and infinities, signs on unsigned values and whole numbers
// written as decimals ("1e3" for --epochs) are refused, never rounded or wrapped.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

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
  int threads = 0;          // 0: not given (EMBER_NUM_THREADS, else all cores)
  int64_t limit_train = 0;  // 0: not given (all)
  int64_t limit_test = 0;   // 0: not given (all)
  std::string save, resume;
  bool json = false;
  bool profile = false;
  std::string profile_trace;  // --profile-trace: a Chrome/Perfetto trace of training, written here
  bool profile_nvtx = false;  // --profile-nvtx: an NVTX range per op, for Nsight Systems
  // Whether the op profiler runs (for the table, the trace or the NVTX ranges).
  bool profiling() const { return profile || !profile_trace.empty() || profile_nvtx; }
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

void add_train_flags(CLI::App& app, TrainConfig& config);
// --profile, --profile-trace and --profile-nvtx (part of add_train_flags; ember_gpt's own
// flag set takes them too).
void add_profile_flags(CLI::App& app, TrainConfig& config);
// --image-size, for the models whose input size follows it (the CNN).
void add_image_size_flag(CLI::App& app, TrainConfig& config);

// Note [Flag ranges]: an ember::Error naming the flag, the value and the range for the
// first numeric value outside its range (0 for --threads, --limit-train and --limit-test
// means "not given").
void check_train_config(const TrainConfig& config);

// The largest --epochs (and epoch a checkpoint may record).
constexpr int64_t kMaxEpochs = 1000000;

// Note [Flag ranges] for an option of another program that bears a flag of the table
// (the PyTorch ports' --epochs, --lr...): the table's range checked on the text, and shown
// in --help as "TYPE in [lo, hi]". Returns the option.
CLI::Option* with_train_range(CLI::Option* option, const std::string& type);

// "" when `text` is a value of flag `flag`'s range, else what is wrong with it (the
// message its validator gives). For the fuzz target and the tests.
std::string train_flag_error(const std::string& flag, const std::string& text);

}  // namespace ember::examples
