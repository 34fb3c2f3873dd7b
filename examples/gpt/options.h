// ember_gpt's command line: the training examples' shared flags (examples/common/flags.h)
// that apply to a language model, nanoGPT's hyperparameters as flags, and the two presets
// of nanoGPT's shakespeare_char config: --preset cpu (its README's CPU run) and --preset
// gpu (the config itself). A flag given on the command line overrides its preset's value.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "examples/common/flags.h"
#include "examples/gpt/model.h"

namespace ember::examples::gpt {

struct GptOptions {
  // --device, --seed, --threads, --batch-size, --lr, --save, --resume, --json, --profile,
  // --profile-trace, --profile-nvtx,
  // --max-memory, --auto-microbatch, --precision, --checkpoint, --estimate-memory,
  // --device-memory, --zero, --cuda-graph, --tf32 (optimizer: adamw).
  TrainConfig common;
  std::string preset = "cpu";
  std::string data;  // empty: the King James Version (data.h)
  GPTConfig model;
  int64_t iters = 2000;
  int64_t eval_interval = 250, eval_iters = 20, log_interval = 10;
  int64_t warmup_iters = 100;
  int64_t lr_decay_iters = 0;  // 0: --iters
  double min_lr = 1e-4, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.99, grad_clip = 1.0;
  // Generation after training (nanoGPT's sample.py defaults).
  int64_t sample = 0;
  std::string prompt = "\n";
  double temperature = 0.8;
  int64_t top_k = 200;
  bool no_kv_cache = false;  // recompute the whole context for every token
};

void add_gpt_flags(CLI::App& app, GptOptions& o);
// After parsing: the preset's value for every preset flag the command line did not give,
// then --lr-decay-iters from --iters when not given.
void apply_preset(const CLI::App& app, GptOptions& o);
// An ember::Error naming the flags when --n-embd is not a multiple of --n-head. Checked
// once the text is loaded, as the model's other needs are: each flag's range alone is
// what its values may be (Note [Flag ranges]).
void check_model_flags(const GptOptions& o);

}  // namespace ember::examples::gpt
