// ember_gpt's flags and presets (options.h).
#include "examples/gpt/options.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "base/error.h"

namespace ember::examples::gpt {
namespace {

// A flag's value under each preset.
struct PresetValue {
  const char* flag;
  std::function<void(GptOptions&, bool gpu)> set;
};

const std::vector<PresetValue>& presets() {
  static const std::vector<PresetValue> v = {
      {"--n-layer", [](GptOptions& o, bool g) { o.model.n_layer = g ? 6 : 4; }},
      {"--n-head", [](GptOptions& o, bool g) { o.model.n_head = g ? 6 : 4; }},
      {"--n-embd", [](GptOptions& o, bool g) { o.model.n_embd = g ? 384 : 128; }},
      {"--block-size", [](GptOptions& o, bool g) { o.model.block_size = g ? 256 : 64; }},
      {"--batch-size", [](GptOptions& o, bool g) { o.common.batch_size = g ? 64 : 12; }},
      {"--dropout", [](GptOptions& o, bool g) { o.model.dropout = g ? 0.2 : 0.0; }},
      {"--iters", [](GptOptions& o, bool g) { o.iters = g ? 5000 : 2000; }},
      {"--eval-iters", [](GptOptions& o, bool g) { o.eval_iters = g ? 200 : 20; }},
      {"--lr", [](GptOptions& o, bool) { o.common.lr = 1e-3; }},
  };
  return v;
}

}  // namespace

void add_gpt_flags(CLI::App& app, GptOptions& o) {
  TrainConfig& c = o.common;
  c.optimizer = "adamw";
  app.add_option("--preset", o.preset,
                 "nanoGPT's shakespeare_char settings: cpu (4 layers, 4 heads, 128 wide, context 64, batch 12, 2000 "
                 "iterations, no dropout) or gpu (6/6/384, context 256, batch 64, dropout 0.2, 5000 iterations); "
                 "flags given override it")
      ->check(CLI::IsMember({"cpu", "gpu"}))
      ->capture_default_str();
  app.add_option("--data", o.data,
                 "a text file to train on, one token per byte (default: the King James Version, from `bible` of "
                 "Debian's bible-kjv)");
  app.add_option("--device", c.device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  auto ranged = [&](CLI::Option* opt, const std::string& type) { return with_train_range(opt, type); };
  ranged(app.add_option("--iters", o.iters, "training iterations in all (a resumed run trains the remaining ones)"),
         "INT");
  ranged(app.add_option("--batch-size", c.batch_size, "sequences per iteration"), "INT");
  ranged(app.add_option("--block-size", o.model.block_size, "context length in tokens"), "INT");
  ranged(app.add_option("--n-layer", o.model.n_layer, "transformer blocks"), "INT");
  ranged(app.add_option("--n-head", o.model.n_head, "attention heads per block"), "INT");
  ranged(app.add_option("--n-embd", o.model.n_embd, "model width"), "INT");
  ranged(app.add_option("--dropout", o.model.dropout, "dropout in training"), "FLOAT");
  ranged(app.add_option("--lr", c.lr, "peak learning rate (after warmup; a run whose loss becomes NaN stops)"),
         "FLOAT");
  ranged(app.add_option("--min-lr", o.min_lr, "learning rate at the end of the cosine decay"), "FLOAT")
      ->capture_default_str();
  ranged(app.add_option("--warmup-iters", o.warmup_iters, "iterations of linear warmup"), "INT")
      ->capture_default_str();
  ranged(app.add_option("--lr-decay-iters", o.lr_decay_iters, "iteration where the cosine decay ends (default: --iters)"),
         "INT");
  ranged(app.add_option("--weight-decay", o.weight_decay,
                        "AdamW weight decay of the Linear weights (none for the LayerNorms and the embeddings)"),
         "FLOAT")
      ->capture_default_str();
  ranged(app.add_option("--beta1", o.beta1, "AdamW beta1"), "FLOAT")->capture_default_str();
  ranged(app.add_option("--beta2", o.beta2, "AdamW beta2"), "FLOAT")->capture_default_str();
  ranged(app.add_option("--grad-clip", o.grad_clip, "clip the gradients' global norm to this"), "FLOAT")
      ->capture_default_str();
  ranged(app.add_option("--eval-interval", o.eval_interval,
                        "evaluate (and with --save, checkpoint) every N iterations and at the end"),
         "INT")
      ->capture_default_str();
  ranged(app.add_option("--eval-iters", o.eval_iters, "batches per evaluation of each split"), "INT");
  ranged(app.add_option("--log-interval", o.log_interval, "print the training loss every N iterations"), "INT")
      ->capture_default_str();
  ranged(app.add_option("--seed", c.seed, "seed of the initialisation, the batches and the sampling"), "UINT")
      ->capture_default_str();
  ranged(app.add_option("--threads", c.threads, "CPU threads, at most the cores (default: EMBER_NUM_THREADS or all cores)"),
         "INT");
  ranged(app.add_option("--sample", o.sample, "after training, write this many characters of generated text"), "INT")
      ->capture_default_str();
  app.add_option("--prompt", o.prompt, "the text generation starts from (default: a newline)");
  ranged(app.add_option("--temperature", o.temperature, "sampling temperature"), "FLOAT")->capture_default_str();
  ranged(app.add_option("--top-k", o.top_k, "sample from the k likeliest tokens only"), "INT")->capture_default_str();
  app.add_flag("--no-kv-cache", o.no_kv_cache,
               "generate by running the whole context again for every token (the reference for the KV cache)");
  app.add_option("--save", c.save, "write a checkpoint here at every evaluation (the file a symlink names)");
  app.add_option("--resume", c.resume, "continue from this checkpoint (the same flags: the run continues bit for bit)");
  app.add_flag("--json", c.json, "end with one JSON line of results");
  add_profile_flags(app, c);
  app.add_option("--precision", c.precision,
                 "fp32, or bf16: matmul/linear compute in bf16 and keep bf16 activations; the weights stay float32")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_flag("--checkpoint", c.checkpoint,
               "activation checkpointing: each transformer block keeps only its input and runs again in backward");
  app.add_option("--max-memory", c.max_memory,
                 "memory training may allocate on the device beyond what it starts with: bytes, a size such as 64MiB, "
                 "or a share of the device such as 50%");
  app.add_flag("--auto-microbatch", c.auto_microbatch,
               "when a step runs out of memory, redo it in micro-batches (same update) instead of stopping");
  app.add_flag("--estimate-memory", c.estimate_memory,
               "print the memory a training step needs, per module, from a dry run on the meta device, and exit");
  app.add_option("--device-memory", c.device_memory,
                 "with --estimate-memory: the memory to fit the batch to (a size such as 16GiB, or 50%)");
  ranged(app.add_option("--zero", c.zero,
                        "with several processes (ember-run): 1 shards the optimizer state across them, 2 the gradients "
                        "too (ZeRO)"),
         "INT")
      ->capture_default_str();
  app.add_flag("--cuda-graph", c.cuda_graph,
               "capture the training step once in a CUDA graph and replay it every iteration (--device cuda, one "
               "process, no dropout: a replay repeats the captured dropout masks)");
  app.add_flag("--tf32", c.tf32, "let float32 matmuls on a CUDA GPU use TF32 tensor cores");
}

void apply_preset(const CLI::App& app, GptOptions& o) {
  const bool gpu = o.preset == "gpu";
  for (const PresetValue& p : presets())
    if (app.count(p.flag) == 0) p.set(o, gpu);
  if (o.lr_decay_iters == 0) o.lr_decay_iters = std::max<int64_t>(o.iters, 1);
  EMBER_CHECK(app.count("--data") == 0 || !o.data.empty(),
              "--data: the path is empty (leave --data out to train on the King James Version)");
}

void check_model_flags(const GptOptions& o) {
  EMBER_CHECK(o.model.n_embd % o.model.n_head == 0, "--n-embd ", o.model.n_embd, " must be a multiple of --n-head ",
              o.model.n_head);
}

}  // namespace ember::examples::gpt
