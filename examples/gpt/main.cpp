// ember_gpt: a character-level GPT (model.h) trained on the King James Version (or any
// text, --data), nanoGPT's train.py in C++: AdamW in two parameter groups, linear warmup
// and cosine decay of the learning rate (get_lr), gradient clipping, the training and
// validation losses estimated every --eval-interval iterations over --eval-iters batches,
// then --sample N characters generated with the KV cache. The training examples' flags
// work here too: --device, --precision bf16, --checkpoint, --auto-microbatch,
// --max-memory, --estimate-memory, --cuda-graph, --save / --resume (bit-exact), and
// data-parallel training under ember-run with --zero 1|2.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/program.h"
#include "comm/ddp.h"
#include "comm/zero.h"
#include "core/atomic_file.h"
#include "core/profiler_trace.h"
#include "examples/common/memory_advice.h"
#include "examples/common/restart.h"
#include "examples/common/train.h"
#include "examples/gpt/attention_oom.h"
#include "examples/gpt/data.h"
#include "examples/gpt/options.h"
#include "examples/gpt/sample.h"
#include "memory/oom.h"
#include "optim/checkpoint.h"
#include "optim/microbatch.h"

namespace ember::examples::gpt {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// nanoGPT's get_lr: linear warmup, then cosine decay to min_lr at lr_decay_iters.
double get_lr(const GptOptions& o, int64_t it) {
  const double lr = o.common.lr;
  if (it < o.warmup_iters) return lr * static_cast<double>(it + 1) / static_cast<double>(o.warmup_iters + 1);
  if (it > o.lr_decay_iters) return o.min_lr;
  const double ratio =
      static_cast<double>(it - o.warmup_iters) / static_cast<double>(std::max<int64_t>(1, o.lr_decay_iters - o.warmup_iters));
  return o.min_lr + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (lr - o.min_lr);
}

// torch.nn.utils.clip_grad_norm_ on the device: the gradients times min(1, max_norm /
// (norm + 1e-6)). Nothing is read back, so it runs inside a CUDA graph too.
void clip_gradients(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard no_grad;
  Tensor total;
  for (const Tensor& p : params)
    if (p.grad().defined()) {
      const Tensor s = sum(mul(p.grad(), p.grad()));
      total = total.defined() ? add(total, s) : s;
    }
  if (!total.defined()) return;
  const Tensor coef =
      clamp(div(full({}, Scalar(max_norm), {total.dtype(), total.device()}), add(sqrt(total), Scalar(1e-6))),
            std::nullopt, 1.0);
  for (const Tensor& p : params)
    if (p.grad().defined()) p.grad().copy_(mul(p.grad(), coef));  // in place: DDP's buckets hold the gradients
}

struct Losses {
  double train = 0, val = 0;
};

// nanoGPT's estimate_loss: the mean loss of eval_iters batches of each split, in eval
// mode. The batches come from a generator seeded afresh for every evaluation, so every
// evaluation (and a resumed run's) sees the same ones and training's draws are untouched.
Losses estimate_loss(GPT& model, const TextData& d, const GptOptions& o, Device device, bool bf16,
                     comm::ProcessGroup* pg) {
  NoGradGuard no_grad;
  std::optional<AutocastScope> autocast;
  if (bf16) autocast.emplace(kBFloat16);
  model.eval();
  const int rank = pg ? pg->rank() : 0, world = pg ? pg->size() : 1;
  Losses out;
  for (const bool val : {false, true}) {
    Generator gen(o.common.seed + 1);
    Tensor total = zeros({}, {kFloat64, device});
    for (int64_t k = 0; k < o.eval_iters; ++k) {
      auto [x, y] = get_batch(val ? d.val : d.train, o.common.batch_size, o.model.block_size, gen, device, rank, world);
      total = add(total, model.loss(x, y).to(kFloat64));
    }
    if (pg) {
      Tensor t = total.to(Device::cpu());
      pg->all_reduce(t)->wait();
      total = div(t, Scalar(static_cast<double>(world)));
    }
    (val ? out.val : out.train) = total.item<double>() / static_cast<double>(o.eval_iters);
  }
  model.train();
  return out;
}

std::string hex(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (const char c : s) {
    out += digits[static_cast<unsigned char>(c) >> 4];
    out += digits[static_cast<unsigned char>(c) & 15];
  }
  return out;
}

// --cuda-graph's needs and what it does not take, as errors that say why.
void check_graph_flags(const GptOptions& o, Device device, int world) {
  const TrainConfig& c = o.common;
  if (!c.cuda_graph) return;
  EMBER_CHECK(device.is_cuda(), "--cuda-graph: needs --device cuda, got ", device.str());
  EMBER_CHECK(world == 1, "--cuda-graph: runs in one process only (DDP's gradient exchange is not captured)");
  EMBER_CHECK(!c.auto_microbatch, "--cuda-graph: not with --auto-microbatch (a graph replays one fixed step)");
  EMBER_CHECK(!c.profiling(), "--cuda-graph: not with --profile, --profile-trace or --profile-nvtx (a replay is one "
              "launch)");
  EMBER_CHECK(o.model.dropout == 0, "--cuda-graph: needs --dropout 0 (a replay repeats the dropout masks drawn at "
              "capture), got ", o.model.dropout);
}

int train(const GptOptions& o) {
  const TrainConfig& c = o.common;
  if (!c.save.empty()) check_can_write(c.save, "--save");
  if (!c.profile_trace.empty()) check_can_write(c.profile_trace, "--profile-trace");
  if (c.threads > 0) set_num_threads(c.threads);
  if (c.tf32) set_allow_tf32(true);
  const comm::LaunchInfo launch = comm::launch_info_from_env();
  const int world = launch.world_size;
  const bool lead = launch.rank == 0;
  std::shared_ptr<comm::ProcessGroup> pg;
  if (world > 1) {
    EMBER_CHECK(c.batch_size % world == 0, "--batch-size ", c.batch_size, " must divide evenly among the ", world,
                " processes");
    pg = comm::init_process_group(launch);
  }
  const Device device = training_device(c, launch, pg != nullptr);
  check_graph_flags(o, device, world);
  const std::size_t budget = c.max_memory.empty() ? 0 : parse_memory_size(c.max_memory, device);
  const int64_t rank_batch = c.batch_size / world, T = o.model.block_size;

  const TextData data = make_text_data(load_text(o.data), T);
  check_model_flags(o);
  // After the data, as the other examples: a flag's range alone is what it may be.
  EMBER_CHECK(c.zero == 0 || pg, "--zero ", c.zero, " needs several processes (run under ember-run)");
  EMBER_CHECK(!(c.zero == 2 && o.grad_clip > 0), "--zero 2 keeps only each process's shard of the gradients, so "
              "the global norm --grad-clip needs is not there: pass --grad-clip 0, or --zero 1");
  GPTConfig config = o.model;
  config.vocab_size = data.vocab_size();
  config.checkpoint = c.checkpoint;
  const std::vector<int64_t> prompt = o.sample > 0 ? data.encode(o.prompt) : std::vector<int64_t>();
  const ModelFactory make_model = [config] { return std::make_shared<GPT>(config); };
  const SampleInput sample_input{{T}, true};
  if (c.estimate_memory) {
    if (lead) print_memory_estimate(c, device, rank_batch, world, make_model, sample_input);
    return 0;
  }
  EMBER_CHECK(c.device_memory.empty(), "--device-memory goes with --estimate-memory");
  const bool resume = resume_checkpoint_exists(c.resume, c.save, launch, pg.get());
  manual_seed(c.seed);
  Generator data_gen(c.seed);

  // What the allocator held before the model: step_peak_bytes leaves it out, as the
  // estimate does (whose step peak counts the parameters).
  const int64_t before_model = memory_stats(device).at("allocated_bytes.all.current");
  auto model = std::make_shared<GPT>(config);
  model->to(device);
  if (lead && !c.json)
    std::printf("%s: %.2fM parameters, vocabulary of %lld characters, %zu training and %zu validation tokens\n",
                model->name().c_str(), static_cast<double>(model->num_params()) / 1e6,
                static_cast<long long>(data.vocab_size()), data.train.size(), data.val.size());
  std::unique_ptr<comm::DistributedDataParallel> ddp;
  if (pg) ddp = std::make_unique<comm::DistributedDataParallel>(model, pg);
  const bool bf16 = c.precision == "bf16";
  // ZeRO's optimizer runs on flat shards of mixed parameters, so it cannot take two groups:
  // there AdamW runs without decay and the decay group is decayed before each step, as
  // AdamW would (p *= 1 - lr * weight_decay, then the Adam step).
  std::vector<optim::ParamGroup> groups = gpt_param_groups(*model, o.weight_decay);
  const optim::AdamW::Options adamw{.lr = c.lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = 1e-8,
                                    .weight_decay = 0, .capturable = c.cuda_graph};
  std::unique_ptr<optim::Optimizer> opt =
      c.zero ? std::unique_ptr<optim::Optimizer>(std::make_unique<comm::ZeroOptimizer>(
                   *ddp, c.zero, [&](std::vector<Tensor> p) { return std::make_unique<optim::AdamW>(p, adamw); }))
             : std::make_unique<optim::AdamW>(groups, adamw);
  auto* zero = dynamic_cast<comm::ZeroOptimizer*>(opt.get());
  int64_t first_iter = 0;
  if (resume) {  // Note [Resuming after a restart] (examples/common/restart.h)
    auto meta = optim::load_checkpoint(c.resume, *model, opt.get());
    EMBER_CHECK(meta.count("model") && meta["model"] == "gpt", "--resume: '", c.resume, "' holds no gpt model");
    EMBER_CHECK(meta["vocab"] == hex(data.vocab), "--resume: '", c.resume,
                "' was trained on a text with another vocabulary (pass the same --data)");
    first_iter = optim::checkpoint_int(meta, "iter", c.resume, 0, 100000000);
    data_gen.set_offset(static_cast<uint64_t>(optim::checkpoint_int(meta, "data_offset", c.resume, 0, INT64_MAX)));
    default_generator().set_offset(
        static_cast<uint64_t>(optim::checkpoint_int(meta, "rng_offset", c.resume, 0, INT64_MAX)));
    if (lead) std::printf("resumed from %s at iteration %lld\n", c.resume.c_str(), static_cast<long long>(first_iter));
  }
  auto save = [&](int64_t it) {
    if (zero) zero->consolidate_state_dict();  // a collective: every rank
    if (lead)
      optim::save_checkpoint(c.save, *model, opt.get(),
                             {{"model", "gpt"},
                              {"iter", std::to_string(it)},
                              {"data_offset", std::to_string(data_gen.offset())},
                              {"rng_offset", std::to_string(default_generator().offset())},
                              {"vocab", hex(data.vocab)}});
    crash_after_checkpoint_for_tests(launch, pg.get());
  };

  memory::CachingAllocator& mem = device_allocator(device);
  if (!c.max_memory.empty()) mem.empty_cache();
  const auto held = static_cast<std::size_t>(mem.stats().reserved_bytes[memory::kAllPools].current);
  std::string cap_origin;
  if (!c.max_memory.empty()) {
    mem.set_memory_limit(held + budget);
    cap_origin = "--max-memory " + c.max_memory + " on top of the " + memory::format_bytes(held) +
                 " held when training started";
  }
  mem.set_advice_terms(advice_terms(c, device, world, held, cap_origin, make_model, sample_input));
  reset_peak_memory_stats(device);

  optim::MicroBatchOptions mb_options;
  if (pg) mb_options.agree = comm::min_over_ranks(pg);
  optim::MicroBatcher batcher(model->parameters(), device, mb_options);
  auto piece_loss = [&](const Tensor& x, const Tensor& y) {
    std::optional<AutocastScope> autocast;  // the forward only; backward follows its dtypes
    if (bf16) autocast.emplace(kBFloat16);
    const Tensor logits = ddp ? ddp->forward(x) : (*model)(x);
    return cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}));
  };
  const std::vector<Tensor> params = model->parameters();
  const std::vector<Tensor>& decayed = groups[0].params;
  // After backward: clipping, ZeRO's decay, the update.
  auto update = [&](int64_t it) {
    if (o.grad_clip > 0) clip_gradients(params, o.grad_clip);
    if (zero && o.weight_decay > 0) {
      NoGradGuard no_grad;
      for (const Tensor& p : decayed) p.detach().copy_(mul(p.detach(), Scalar(1 - get_lr(o, it) * o.weight_decay)));
    }
    opt->step();
  };
  // --cuda-graph: after kWarmup eager steps (the optimizer's state exists then), the step
  // on static x, y is captured once and replayed (examples/common/graph_step.h's scheme).
  constexpr int64_t kWarmup = 3;
  CudaGraph graph;
  Tensor gx, gy, gloss;
  int64_t replays = 0;

  std::vector<nlohmann::json> history;
  Losses last;
  double train_time = 0;
  int64_t steps = 0, micro_batch = 0, retries = 0;
  double last_train_loss = NAN;
  const bool tty = isatty(STDOUT_FILENO) && !c.json && lead;
  if (c.profiling()) start_op_profiler({.record_trace = !c.profile_trace.empty(), .nvtx = c.profile_nvtx});
  auto t0 = Clock::now();
  // An out-of-memory report at a long context says what the attention takes and which
  // --block-size fits (attention_oom.h).
  const AttentionOomContext oom_context{&c, config, device, world, rank_batch, held};
  try {
    for (int64_t it = first_iter;; ++it) {
      if (it % o.eval_interval == 0 || it == o.iters) {
        train_time += seconds_since(t0);
        if (c.profiling()) stop_op_profiler();
        last = estimate_loss(*model, data, o, device, bf16, pg.get());
        if (c.profiling()) start_op_profiler(/*resume=*/true);
        EMBER_CHECK(std::isfinite(last.train) && std::isfinite(last.val), "training diverged: the loss at iteration ",
                    it, " is ", last.train, " (--lr ", c.lr, "; a smaller --lr may train); ",
                    c.save.empty() ? std::string("nothing was saved")
                                   : "the last checkpoint in " + c.save + " is from before it");
        history.push_back({{"iter", it}, {"train_loss", last.train}, {"val_loss", last.val}});
        if (lead && !c.json)
          std::printf("%sstep %lld: train loss %.4f, val loss %.4f\n", tty ? "\n" : "", static_cast<long long>(it),
                      last.train, last.val);
        if (!c.save.empty() && it > first_iter) save(it);
        t0 = Clock::now();
      }
      if (it >= o.iters) break;
      const double lr = get_lr(o, it);
      opt->set_lr(lr);
      auto [x, y] = get_batch(data.train, c.batch_size, T, data_gen, device, launch.rank, world);
      Tensor loss;
      if (c.cuda_graph && steps >= kWarmup) {
        if (!graph.captured()) {
          gx = x.clone();
          gy = y.clone();
          CudaGraphCapture capture(graph, device);
          opt->zero_grad(/*set_to_none=*/true);
          gloss = piece_loss(gx, gy);
          gloss.backward();
          update(it);
        } else {
          gx.copy_(x);
          gy.copy_(y);
        }
        graph.replay();
        ++replays;
        loss = gloss.detach();
      } else if (c.auto_microbatch) {
        optim::MicroBatchResult r;
        if (ddp) {
          auto no_sync = ddp->no_sync();
          r = batcher.backward(x, y, piece_loss);
        } else {
          r = batcher.backward(x, y, piece_loss);
        }
        if (ddp) ddp->sync_gradients();
        loss = scalar_tensor(r.loss, {kFloat64, device});
        retries += r.retries;
        if (lead && r.micro_batch != micro_batch && r.micro_batch < x.size(0))
          std::printf("out of memory: continuing with micro-batches of %lld sequences (batch %lld)\n",
                      static_cast<long long>(r.micro_batch), static_cast<long long>(x.size(0)));
        micro_batch = r.micro_batch;
      } else {
        opt->zero_grad();
        loss = piece_loss(x, y);
        loss.backward();
      }
      if (!graph.captured()) {
        if (ddp) ddp->synchronize();
        update(it);
      }
      ++steps;
      if ((it + 1) % o.log_interval == 0 || it + 1 == o.iters) {
        last_train_loss = loss.item<double>();
        if (tty) {
          std::printf("\riter %lld/%lld: loss %.4f, lr %.2e, %.1f ms/iter", static_cast<long long>(it + 1),
                      static_cast<long long>(o.iters), last_train_loss, lr,
                      1e3 * (train_time + seconds_since(t0)) / static_cast<double>(steps));
          std::fflush(stdout);
        }
      }
    }
  } catch (const OutOfMemoryError& e) {
    throw with_attention_note(e, oom_context);
  }
  const double ms_per_iter = steps ? 1e3 * train_time / static_cast<double>(steps) : 0.0;
  if (c.profiling()) finish_profile(c, lead, train_time);
  if (lead && !c.json)
    std::printf("%lld iterations, %.2f ms per iteration, val loss %.4f\n", static_cast<long long>(steps), ms_per_iter,
                last.val);

  std::string text;
  if (o.sample > 0 && lead) {
    Generator gen(c.seed);
    const std::vector<int64_t> ids =
        generate(*model, prompt,
                 {.tokens = o.sample, .temperature = o.temperature, .top_k = o.top_k, .kv_cache = !o.no_kv_cache},
                 gen);
    text = data.decode(ids);
    if (!c.json) std::printf("%s\n", text.c_str());
  }
  if (pg) pg->barrier()->wait();  // rank 0 serves the store: it leaves last
  if (c.json && lead) {
    const double tokens = static_cast<double>(steps * c.batch_size * T);
    nlohmann::json j = {{"model", "gpt"},
                        {"val_loss", last.val},
                        {"train_loss", last.train},
                        {"last_batch_loss", last_train_loss},
                        {"iters", o.iters},
                        {"steps", steps},
                        {"ms_per_iter", ms_per_iter},
                        {"epoch_seconds", std::vector<double>{train_time}},
                        {"train_samples_per_s", train_time > 0 ? static_cast<double>(steps * c.batch_size) / train_time : 0.0},
                        {"tokens_per_s", train_time > 0 ? tokens / train_time : 0.0},
                        {"evals", history},
                        {"num_params", model->num_params()},
                        {"vocab_size", data.vocab_size()},
                        {"peak_memory_bytes", memory_stats(device).at("allocated_bytes.all.peak")},
                        {"peak_reserved_bytes", memory_stats(device).at("reserved_bytes.all.peak")},
                        {"step_peak_bytes", memory_stats(device).at("allocated_bytes.all.peak") - before_model},
                        {"checkpoint", c.checkpoint},
                        {"precision", c.precision},
                        {"cuda_graph_replays", replays},
                        {"micro_batch", micro_batch},
                        {"microbatch_retries", retries},
                        {"device", device.str()},
                        {"threads", get_num_threads()},
                        {"cpu_isa", cpu_vector_isa()},
                        {"seed", c.seed},
                        {"world_size", world},
                        {"preset", o.preset}};
    if (o.sample > 0) j["sample"] = text;
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace
}  // namespace ember::examples::gpt

int main(int argc, char** argv) {
  return ember::run_program("ember_gpt", [&] {
    ember::examples::line_buffered_stdout();
    CLI::App app{"ember gpt: train a character-level GPT (nanoGPT) on the King James Version or any text, and sample "
                 "from it"};
    app.failure_message(ember::cli_failure_message);
    ember::examples::gpt::GptOptions options;
    ember::examples::gpt::add_gpt_flags(app, options);
    CLI11_PARSE(app, argc, argv);
    ember::examples::gpt::apply_preset(app, options);
    return ember::examples::gpt::train(options);
  });
}
