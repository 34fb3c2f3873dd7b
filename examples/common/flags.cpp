// The examples' flags and Note [Flag ranges] (flags.h).
#include "examples/common/flags.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "base/error.h"

namespace ember::examples {
namespace {

struct FlagRange {
  std::string flag;
  bool integer = true;
  int64_t ilo = 0;  // integers: [ilo, ihi]
  uint64_t ihi = 0;
  double lo = 0, hi = 0;  // reals: [lo, hi]
  std::string why;        // after the range in messages
  std::string range() const {
    return integer ? detail::str("[", ilo, ", ", ihi, "]") : detail::str("[", lo, ", ", hi, "]");
  }
};

FlagRange ints(std::string flag, int64_t lo, uint64_t hi, std::string why = "") {
  return {std::move(flag), true, lo, hi, 0, 0, std::move(why)};
}
FlagRange reals(std::string flag, double lo, double hi, std::string why = "") {
  return {std::move(flag), false, 0, 0, lo, hi, std::move(why)};
}

int cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

const std::vector<FlagRange>& table() {
  static const std::vector<FlagRange> t = {
      ints("--epochs", 0, kMaxEpochs),
      ints("--batch-size", 1, 1 << 20),
      reals("--lr", 0, 1000),
      ints("--seed", 0, UINT64_MAX),
      ints("--threads", 1, static_cast<uint64_t>(cores()),
           "(1 to the cores of this machine: more threads than cores only wait for each other)"),
      ints("--limit-train", 1, 1000000000),
      ints("--limit-test", 1, 1000000000),
      ints("--zero", 0, 2),
      ints("--memory-snapshot-steps", 0, 1000000000),
      reals("--prune", 0, 1),
      ints("--image-size", 4, 28),
      // examples/gpt
      ints("--iters", 0, 100000000),
      ints("--eval-interval", 1, 100000000),
      ints("--eval-iters", 1, 1000000),
      ints("--log-interval", 1, 100000000),
      ints("--warmup-iters", 0, 100000000),
      ints("--lr-decay-iters", 1, 100000000),
      reals("--min-lr", 0, 1000),
      reals("--weight-decay", 0, 100),
      reals("--beta1", 0, 0.999999),
      reals("--beta2", 0, 0.999999),
      reals("--grad-clip", 0, 1e6, "(0: no clipping)"),
      ints("--n-layer", 1, 1000),
      ints("--n-head", 1, 1024),
      ints("--n-embd", 1, 65536),
      ints("--block-size", 1, 1 << 20),
      reals("--dropout", 0, 0.99),
      ints("--sample", 0, 100000000),
      reals("--temperature", 0.001, 100),
      ints("--top-k", 0, 1000000, "(0: every token)")};
  return t;
}

const FlagRange& range_of(const std::string& flag) {
  for (const FlagRange& r : table())
    if (r.flag == flag) return r;
  EMBER_FAIL("flags: no range for '", flag, "'");
}

std::string check(const FlagRange& r, const std::string& text) {
  const char *b = text.data(), *e = b + text.size();
  const std::string outside = "'" + text + "' is outside " + r.range() + (r.why.empty() ? "" : " " + r.why);
  if (r.integer) {
    // Through int64 when negative, uint64 otherwise: every value of either type is exact.
    const bool negative = !text.empty() && text[0] == '-';
    int64_t s = 0;
    uint64_t u = 0;
    const auto [p, ec] = negative ? std::from_chars(b, e, s) : std::from_chars(b, e, u);
    if (text.empty() || p != e || ec == std::errc::invalid_argument) return "'" + text + "' is not a whole number";
    if (ec != std::errc()) return outside;
    const bool in = negative ? s >= r.ilo : (r.ilo <= 0 || u >= static_cast<uint64_t>(r.ilo)) && u <= r.ihi;
    return in ? "" : outside;
  }
  char* end = nullptr;
  const double v = text.empty() ? 0 : std::strtod(b, &end);
  if (text.empty() || end != e || text.find('\0') != std::string::npos) return "'" + text + "' is not a number";
  if (!std::isfinite(v)) return "'" + text + "' is not a finite number";
  return v >= r.lo && v <= r.hi ? "" : outside;
}

std::string text_of(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

// The flag's value is checked as text, before CLI11 converts it; --help shows the range.
CLI::Option* with_train_range(CLI::Option* o, const std::string& type) {
  const FlagRange& r = range_of(o->get_name());
  o->check(CLI::Validator([r](std::string& text) { return check(r, text); }, ""));
  o->type_name(type + " in " + r.range());
  return o;
}

std::string train_flag_error(const std::string& flag, const std::string& text) {
  return check(range_of(flag), text);
}

void check_train_config(const TrainConfig& c) {
  auto need = [](const std::string& flag, const std::string& text) {
    const std::string e = train_flag_error(flag, text);
    EMBER_CHECK(e.empty(), flag, ": ", e);
  };
  need("--epochs", std::to_string(c.epochs));
  need("--batch-size", std::to_string(c.batch_size));
  need("--lr", text_of(c.lr));
  if (c.threads != 0) need("--threads", std::to_string(c.threads));
  if (c.limit_train != 0) need("--limit-train", std::to_string(c.limit_train));
  if (c.limit_test != 0) need("--limit-test", std::to_string(c.limit_test));
  need("--zero", std::to_string(c.zero));
  need("--memory-snapshot-steps", std::to_string(c.memory_snapshot_steps));
  need("--prune", text_of(c.prune));
  need("--image-size", std::to_string(c.image_size));
}

void add_profile_flags(CLI::App& app, TrainConfig& c) {
  app.add_flag("--profile", c.profile, "print the time each kernel took in training, as a table");
  app.add_option("--profile-trace", c.profile_trace,
                 "write a Chrome/Perfetto trace of training here: ops per host thread, their device time per "
                 "CUDA stream (open it in ui.perfetto.dev or chrome://tracing)");
  app.add_flag("--profile-nvtx", c.profile_nvtx,
               "open an NVTX range per op during training, so that Nsight Systems (nsys profile) shows ember's op "
               "names over the kernels (a build with a real GPU backend only)");
}

void add_train_flags(CLI::App& app, TrainConfig& c) {
  app.add_option("--data", c.data, "Fashion-MNIST folder (IDX files)")->capture_default_str();
  app.add_option("--device", c.device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  app.add_flag("--data-on-device", c.data_on_device,
               "keep the whole training set on the device (a CUDA device otherwise gets each batch through pinned "
               "memory, copied while the previous step runs)");
  app.add_flag("--cuda-graph", c.cuda_graph,
               "capture the whole training step (forward, loss, backward, optimizer step) once in a CUDA graph and "
               "replay it for every batch; needs --device cuda and --data-on-device (the last partial batch runs "
               "eagerly)");
  with_train_range(app.add_option("--epochs", c.epochs, "epochs in all (a resumed run trains the remaining ones)"), "INT")
      ->capture_default_str();
  with_train_range(app.add_option("--batch-size", c.batch_size, "samples per step"), "INT")->capture_default_str();
  with_train_range(app.add_option("--lr", c.lr,
                        "learning rate (a run whose loss becomes NaN or infinite stops with an error)"),
         "FLOAT")
      ->capture_default_str();
  app.add_option("--optimizer", c.optimizer, "sgd, adam or adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  with_train_range(app.add_option("--seed", c.seed, "seed of the initialisation and the shuffle"), "UINT")
      ->capture_default_str();
  with_train_range(app.add_option("--threads", c.threads,
                        "CPU threads, at most the cores (default: EMBER_NUM_THREADS or all cores)"),
         "INT");
  with_train_range(app.add_option("--limit-train", c.limit_train,
                        "use only the first N training images (all of them when N is more)"),
         "INT");
  with_train_range(app.add_option("--limit-test", c.limit_test, "evaluate on the first N test images only"), "INT");
  app.add_option("--save", c.save, "write a checkpoint here after every epoch (the file a symlink names)");
  app.add_option("--resume", c.resume,
                 "continue from this checkpoint; a missing one is an error, except under ember-run or torchrun "
                 "--max-restarts K > 0 when --save names the same file (not written yet: start from the beginning)");
  app.add_flag("--tf32", c.tf32,
               "let float32 matmul, linear and conv2d on a CUDA GPU use TF32 tensor cores (10-bit mantissa "
               "products, as PyTorch's allow_tf32); no effect on the cpu or the emulated device");
  app.add_flag("--json", c.json, "end with one JSON line of results");
  add_profile_flags(app, c);
  app.add_option("--max-memory", c.max_memory,
                 "memory training may allocate on the device beyond what it starts with (the dataset, on the "
                 "cpu): bytes, a size such as 64MiB or 2GiB, or a share of the device such as 50%");
  with_train_range(app.add_option("--zero", c.zero,
                        "with several processes: 1 shards the optimizer state across them, 2 the gradients too "
                        "(ZeRO)"),
         "INT")
      ->capture_default_str();
  app.add_flag("--auto-microbatch", c.auto_microbatch,
               "when a step runs out of memory, redo it in micro-batches (same update) instead of stopping");
  app.add_option("--precision", c.precision,
                 "fp32, or bf16: matmul/linear/conv2d compute in bf16 and keep bf16 activations; the weights stay "
                 "float32 (core/autocast.h)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_flag("--checkpoint", c.checkpoint,
               "activation checkpointing: each layer with weights and the activation and pool after it keep only "
               "their input, and run again in backward (less memory, one more forward)");
  app.add_flag("--estimate-memory", c.estimate_memory,
               "print the memory a training step needs, per module, from a dry run on the meta device, and exit");
  app.add_option("--device-memory", c.device_memory,
                 "with --estimate-memory: the memory to fit the batch to (a size such as 16GiB, or 50%; default: "
                 "the device's)");
  with_train_range(app.add_option("--prune", c.prune,
                        "after training, prune this share of the Linear weights (smallest magnitudes, one global "
                        "threshold), fine-tune one epoch with the pruned weights held at zero, then run and "
                        "evaluate the layers in sparse CSR form; reports accuracy and weight memory before and "
                        "after"),
         "FLOAT");
  app.add_option("--memory-snapshot", c.memory_snapshot,
                 "write the memory of the first training steps here (JSON for ember-memviz; *.trace.json: a "
                 "Chrome/Perfetto trace)");
  with_train_range(app.add_option("--memory-snapshot-steps", c.memory_snapshot_steps,
                        "the steps --memory-snapshot covers (0: the whole run, written at the end)"),
         "INT")
      ->capture_default_str();
}

void add_image_size_flag(CLI::App& app, TrainConfig& c) {
  with_train_range(app.add_option("--image-size", c.image_size,
                        "resize the images to N x N pixels (bilinear) when they are loaded: smaller activations, "
                        "less memory"),
         "INT")
      ->capture_default_str();
}

}  // namespace ember::examples
