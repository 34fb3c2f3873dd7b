#include "examples/common/train.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "base/program.h"
#include "comm/ddp.h"
#include "comm/rendezvous.h"
#include "comm/zero.h"
#include "core/atomic_file.h"
#include "core/profiler_trace.h"
#include "data/dataset.h"
#include "data/prefetch.h"
#include "data/sampler.h"
#include "examples/common/graph_step.h"
#include "examples/common/memory_advice.h"
#include "examples/common/restart.h"
#include "memory/oom.h"
#include "optim/checkpoint.h"
#include "optim/memory_estimate.h"
#include "optim/microbatch.h"

namespace ember::examples {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// capturable: lr and step on the device, for --cuda-graph (optim/optimizer.h).
std::unique_ptr<optim::Optimizer> make_optimizer(const std::string& name, std::vector<Tensor> params, double lr,
                                                 bool capturable) {
  if (name == "adam")
    return std::make_unique<optim::Adam>(std::move(params), optim::Adam::Options{.lr = lr, .capturable = capturable});
  if (name == "adamw")
    return std::make_unique<optim::AdamW>(std::move(params),
                                          optim::AdamW::Options{.lr = lr, .capturable = capturable});
  if (name == "sgd")
    return std::make_unique<optim::SGD>(std::move(params),
                                        optim::SGD::Options{.lr = lr, .momentum = 0.9, .capturable = capturable});
  EMBER_FAIL("--optimizer: unknown optimizer '", name, "' (expected sgd, adam or adamw)");
}

void progress(int64_t epoch, int64_t epochs, int64_t done, int64_t total, double loss) {
  const int width = 30;
  const int fill = static_cast<int>(width * done / std::max<int64_t>(total, 1));
  std::printf("\repoch %lld/%lld [%s%s] %lld/%lld loss %.4f", static_cast<long long>(epoch + 1),
              static_cast<long long>(epochs), std::string(fill, '#').c_str(), std::string(width - fill, '.').c_str(),
              static_cast<long long>(done), static_cast<long long>(total), loss);
  std::fflush(stdout);
}

// The share of `test` the model classifies right, in batches of B. With a process group,
// each rank classifies its slice of the test set and the counts are summed.
double evaluate(nn::Module& model, const data::TensorDataset& test, int64_t B, bool bf16, comm::ProcessGroup* pg) {
  NoGradGuard no_grad;
  std::optional<AutocastScope> autocast;
  if (bf16) autocast.emplace(kBFloat16);
  model.eval();
  const int64_t world = pg ? pg->size() : 1, rank = pg ? pg->rank() : 0;
  const int64_t begin = test.size() * rank / world, end = test.size() * (rank + 1) / world;
  // Counted on the device and read once: a read per batch would wait for each batch.
  Tensor correct = zeros({}, {kInt64, test.data().device()});
  for (int64_t s = begin; s < end; s += B) {
    const int64_t n = std::min(B, end - s);
    Tensor logits = model(test.data().narrow(0, s, n));
    correct = add(correct, sum(eq(argmax(logits, 1), test.targets().narrow(0, s, n))));
  }
  model.train();
  int64_t right = correct.item<int64_t>();
  if (pg) {
    Tensor t = tensor({static_cast<double>(right)}, {kInt64, Device::cpu()});
    pg->all_reduce(t)->wait();
    right = t.item<int64_t>();
  }
  return static_cast<double>(right) / static_cast<double>(std::max<int64_t>(test.size(), 1));
}

// --cuda-graph's needs, and the options it does not take, as errors that say why.
void check_cuda_graph_flags(const TrainConfig& c, Device device, int world) {
  if (!c.cuda_graph) return;
  EMBER_CHECK(device.is_cuda(), "--cuda-graph: needs --device cuda (a CUDA graph replays work on a CUDA device), got ",
              device.str());
  EMBER_CHECK(c.data_on_device, "--cuda-graph: needs --data-on-device (each batch is gathered on the device into the "
              "graph's static inputs)");
  EMBER_CHECK(world == 1, "--cuda-graph: runs in one process only (DDP's gradient exchange is not captured)");
  EMBER_CHECK(!c.auto_microbatch, "--cuda-graph: not with --auto-microbatch (a graph replays one fixed step; it "
              "cannot split a step that runs out of memory)");
  EMBER_CHECK(c.prune == 0, "--cuda-graph: not with --prune (its masks are applied between steps)");
  EMBER_CHECK(!c.profiling(), "--cuda-graph: not with --profile, --profile-trace or --profile-nvtx (a replay is one "
              "launch; the op profiler times ops as they are queued)");
}

// A training run's --threads over the ranks of this node beyond its cores: said once, by the
// node's first rank (EMBER_NUM_THREADS from ember-run is ember-run's to warn about).
void warn_if_oversubscribed(const TrainConfig& c, const comm::LaunchInfo& launch) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t threads = static_cast<int64_t>(c.threads) * launch.local_world_size;
  if (c.threads == 0 || threads <= cores || launch.local_rank != 0) return;
  std::fprintf(stderr,
               "warning: %d processes on this node x --threads %d = %lld threads on %d cores: they will wait for "
               "each other (--threads %d would not)\n",
               launch.local_world_size, c.threads, static_cast<long long>(threads), cores,
               std::max(1, cores / launch.local_world_size));
}

}  // namespace

Device training_device(const TrainConfig& c, const comm::LaunchInfo& launch, bool distributed) {
  // With several processes each takes its own device, cuda:LOCAL_RANK (torchrun's
  // convention): --device cuda means that, and auto means it when this node has a CUDA
  // device for each of its processes (comm::local_device), else the CPU.
  std::string dev = c.device;
  Device device;
  if (distributed && (dev == "auto" || dev == "cuda")) {
    device = dev == "auto" ? comm::local_device(launch) : Device::cuda(launch.local_rank);
  } else {
    if (dev == "auto") {
      dev = default_device_name();
      if (dev == "cpu" && launch.rank == 0) std::printf("no CUDA device found: training on the cpu\n");
    }
    device = Device::parse(dev);
  }
  dev = device.str();
  if (device.is_cuda()) {
    const int count = cuda_device_count();
    EMBER_CHECK(device.index < count, "--device ", dev, ": ",
                !cuda_backend_built() ? std::string("this build of ember has no CUDA backend")
                : count == 0          ? std::string("no CUDA device is available")
                                      : detail::str("this process sees ", count, " CUDA device(s)"));
  }
  return device;
}

void line_buffered_stdout() { std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ); }

void finish_profile(const TrainConfig& c, bool lead, double train_seconds) {
  const std::vector<OpProfile> profile = stop_op_profiler();
  if (!lead) return;
  if (c.profile) std::printf("%s", format_op_profile(profile, train_seconds).c_str());
  if (!c.profile_trace.empty()) {
    export_chrome_trace(c.profile_trace);
    std::printf("trace of training written to %s (open it in ui.perfetto.dev or chrome://tracing)\n",
                c.profile_trace.c_str());
  }
}

int train_main(const std::string& model_name, const TrainConfig& c,
               const std::function<std::shared_ptr<nn::Module>()>& make_model) {
  try {
    check_train_config(c);
    // The files are written after the first epoch or steps: an unwritable path fails now.
    if (!c.save.empty()) check_can_write(c.save, "--save");
    if (!c.memory_snapshot.empty()) check_can_write(c.memory_snapshot, "--memory-snapshot");
    if (!c.profile_trace.empty()) check_can_write(c.profile_trace, "--profile-trace");
    if (c.threads > 0) set_num_threads(c.threads);
    if (c.tf32) set_allow_tf32(true);
    // Under ember-run (or torchrun, srun, mpirun) with several processes: data-parallel
    // training. --batch-size stays the global batch; each rank takes its share of every
    // step (DistributedSampler), DDP averages the gradients, rank 0 alone prints and saves.
    const comm::LaunchInfo launch = comm::launch_info_from_env();
    const int world = launch.world_size;
    warn_if_oversubscribed(c, launch);
    std::shared_ptr<comm::ProcessGroup> pg;
    if (world > 1) {
      EMBER_CHECK(c.batch_size % world == 0, "--batch-size ", c.batch_size, " must divide evenly among the ", world,
                  " processes (each takes batch-size / ", world, " samples of every step)");
      pg = comm::init_process_group(launch);
    }
    EMBER_CHECK(!(pg && c.prune > 0), "--prune: runs in one process only");
    const bool lead = launch.rank == 0;
    const int64_t rank_batch = c.batch_size / world;

    const Device device = training_device(c, launch, pg != nullptr);

    check_cuda_graph_flags(c, device, world);
    // Parsed now, before the data is loaded: a bad size fails at once.
    const std::size_t budget = c.max_memory.empty() ? 0 : parse_memory_size(c.max_memory, device);
    if (c.estimate_memory) {  // every rank's step is alike: rank 0 prints it
      if (lead) print_memory_estimate(c, device, rank_batch, world, make_model, image_sample(c));
      return 0;
    }
    EMBER_CHECK(c.device_memory.empty(), "--device-memory goes with --estimate-memory");
    const bool resume = resume_checkpoint_exists(c.resume, c.save, launch, pg.get());
    manual_seed(c.seed);
    // Each load leaves intermediate copies (bytes, floats, scaled floats) in the cache:
    // returned at once, before a later tensor can split their segments and pin them.
    data::TensorDataset train = data::load_fashion_mnist(c.data, true);
    empty_cache(device);
    if (c.limit_train > 0) train = train.head(c.limit_train);
    data::TensorDataset test = data::load_fashion_mnist(c.data, false);
    if (c.limit_test > 0) test = test.head(c.limit_test);
    if (c.image_size != train.data().size(-1)) {
      // Once, as the data is loaded: every epoch then reads the smaller images.
      const data::Transform resize = data::resize(c.image_size, c.image_size);
      Generator unused;
      train = data::TensorDataset(resize(train.data(), unused), train.targets());
      test = data::TensorDataset(resize(test.data(), unused), test.targets());
    }
    empty_cache(device);
    if (device.is_cuda()) {
      // The test set is read whole after every epoch: it lives on the device.
      test = data::TensorDataset(test.data().to(device), test.targets().to(device));
      if (c.data_on_device) train = data::TensorDataset(train.data().to(device), train.targets().to(device));
    }

    // What the datasets hold on the device: step_peak_bytes leaves it out.
    const int64_t data_bytes = memory_stats(device).at("allocated_bytes.all.current");
    std::shared_ptr<nn::Module> model = make_model();
    model->to(device);
    if (c.checkpoint) {
      auto* seq = dynamic_cast<nn::Sequential*>(model.get());
      EMBER_CHECK(seq, "--checkpoint: the ", model_name, " model is not a Sequential");
      model = nn::checkpoint_blocks(*seq);
    }
    std::unique_ptr<comm::DistributedDataParallel> ddp;
    if (pg) ddp = std::make_unique<comm::DistributedDataParallel>(model, pg);
    EMBER_CHECK(c.zero == 0 || ddp, "--zero ", c.zero, " needs several processes (run under ember-run)");
    auto inner = [&](std::vector<Tensor> params) {
      return make_optimizer(c.optimizer, std::move(params), c.lr, c.cuda_graph);
    };
    std::unique_ptr<optim::Optimizer> opt =
        c.zero ? std::make_unique<comm::ZeroOptimizer>(*ddp, c.zero, inner) : inner(model->parameters());
    int64_t first_epoch = 0;
    if (resume) {  // Note [Resuming after a restart] (restart.h)
      auto meta = optim::load_checkpoint(c.resume, *model, opt.get());
      EMBER_CHECK(meta.count("model") && meta["model"] == model_name, "--resume: '", c.resume, "' holds a ",
                  meta.count("model") ? meta["model"] : std::string("?"), " model, not ", model_name);
      first_epoch = optim::checkpoint_int(meta, "epoch", c.resume, 0, kMaxEpochs);
      if (lead)
        std::printf("%sresumed from %s after epoch %lld\n",
                    launch.restart > 0 ? ("restart " + std::to_string(launch.restart) + ": ").c_str() : "",
                    c.resume.c_str(), static_cast<long long>(first_epoch));
    }

    data::DataLoaderOptions loader_options{.batch_size = rank_batch,
                                           .shuffle = true,
                                           .seed = c.seed,
                                           .pin_memory = device.is_cuda() && train.data().device().is_cpu()};
    if (pg)
      loader_options.sampler = std::make_shared<data::DistributedSampler>(
          train.size(), pg->rank(), world, data::DistributedSamplerOptions{.seed = c.seed});
    data::DataLoader loader(train, loader_options);
    data::DevicePrefetcher batches(loader, device);
    nn::CrossEntropyLoss criterion;
    memory::CachingAllocator& mem = device_allocator(device);
    const bool tty = isatty(STDOUT_FILENO) && !c.json && lead;
    std::string cap_origin;
    if (!c.max_memory.empty()) mem.empty_cache();
    const auto held = static_cast<std::size_t>(mem.stats().reserved_bytes[memory::kAllPools].current);
    if (!c.max_memory.empty()) {
      mem.set_memory_limit(held + budget);
      cap_origin = "--max-memory " + c.max_memory + " on top of the " + memory::format_bytes(held) +
                   " held when training started";
    }
    // Out-of-memory reports in this program's words (examples/common/memory_advice.h).
    const memory::AdviceTerms saved_terms = mem.advice_terms();
    mem.set_advice_terms(advice_terms(c, device, world, held, cap_origin, make_model, image_sample(c)));
    struct RestoreTerms {  // the allocator outlives this run (tests call train_main again)
      memory::CachingAllocator& mem;
      const memory::AdviceTerms& terms;
      ~RestoreTerms() { mem.set_advice_terms(terms); }
    } restore_terms{mem, saved_terms};
    if (!c.memory_snapshot.empty()) mem.record_history(1 << 20);
    auto write_snapshot = [&](const std::string& what, bool after_progress_bar) {
      save_memory_snapshot(c.memory_snapshot, device);
      mem.record_history(0);
      if (lead) std::printf("%swrote the memory of %s to %s\n", after_progress_bar ? "\n" : "", what.c_str(),
                  c.memory_snapshot.c_str());
    };
    reset_peak_memory_stats(device);
    // Samples the current attempt classified right, counted on the device: reading
    // results back every step would make the host wait for each step.
    Tensor correct_in_step;
    optim::MicroBatchOptions mb_options{.on_attempt = [&] { correct_in_step = {}; }};
    if (pg) mb_options.agree = comm::min_over_ranks(pg);  // every rank splits its batch alike
    optim::MicroBatcher batcher(model->parameters(), device, mb_options);
    const bool bf16 = c.precision == "bf16";
    auto piece_loss = [&](const Tensor& x, const Tensor& y) {
      std::optional<AutocastScope> autocast;  // the forward only; backward follows its dtypes
      if (bf16) autocast.emplace(kBFloat16);
      Tensor logits = ddp ? ddp->forward(x) : (*model)(x);
      Tensor right = sum(eq(argmax(logits.detach(), 1), y));
      correct_in_step = correct_in_step.defined() ? add(correct_in_step, right) : right;
      return criterion(logits, y);
    };
    std::optional<GraphStep> graph_step;
    if (c.cuda_graph) {
      auto loss_and_right = [&](const Tensor& x, const Tensor& y) {
        correct_in_step = {};
        Tensor l = piece_loss(x, y);
        return std::pair{l, correct_in_step};
      };
      const Shape& shape = train.data().shape();
      graph_step.emplace(*opt, loss_and_right, device, rank_batch, Shape(shape.begin() + 1, shape.end()),
                         train.data().dtype());
    }
    int64_t micro_batch = 0, retries = 0;
    // Evaluation goes in batches of the step's pieces: it then needs less memory than a step.
    auto test_accuracy = [&] {
      return evaluate(*model, test, micro_batch > 0 ? micro_batch : c.batch_size, bf16, pg.get());
    };
    // Raw allocations (new segments) during training steps after the first: in steady
    // state the cache serves every step, and this stays 0.
    int64_t raw_allocs_after_first = 0, first_step_done = 0;
    std::vector<double> epoch_seconds, epoch_accuracy, epoch_loss;
    double last_loss = 0;
    int64_t samples = 0;
    double train_time = 0;
    if (c.profiling()) start_op_profiler({.record_trace = !c.profile_trace.empty(), .nvtx = c.profile_nvtx});
    // One epoch of training; after_step runs after every optimizer step (--prune's masks).
    std::function<void()> after_step;
    int64_t shown_epochs = c.epochs;
    auto train_epoch = [&](int64_t e) {
      const auto t0 = Clock::now();
      batches.start_epoch(e);
      if (graph_step) graph_step->start_epoch();  // its own sums, which its graph updates in place
      Tensor loss_sum = graph_step ? graph_step->loss_sum() : zeros({}, {kFloat64, device});
      Tensor correct = graph_step ? graph_step->correct() : zeros({}, {kInt64, device});
      int64_t seen = 0, step = 0;
      while (auto batch = batches.next()) {
        const int64_t raw_before = mem.stats().num_device_alloc;
        const int64_t n = batch->data.size(0);
        Tensor loss;  // the step's mean loss, on the device
        if (graph_step) {
          graph_step->step(batch->data, batch->target);
        } else if (c.auto_microbatch) {
          optim::MicroBatchResult r;
          if (ddp) {  // accumulate locally, exchange once per step
            auto no_sync = ddp->no_sync();
            r = batcher.backward(batch->data, batch->target, piece_loss);
          } else {
            r = batcher.backward(batch->data, batch->target, piece_loss);
          }
          if (ddp) ddp->sync_gradients();
          loss = scalar_tensor(r.loss, {kFloat64, device});
          retries += r.retries;
          if (lead && r.micro_batch != micro_batch && r.micro_batch < batch->data.size(0))
            std::printf("%sout of memory: continuing with micro-batches of %lld samples (batch %lld)\n", tty ? "\n" : "",
                        static_cast<long long>(r.micro_batch), static_cast<long long>(batch->data.size(0)));
          micro_batch = r.micro_batch;
        } else {
          opt->zero_grad();
          correct_in_step = {};
          Tensor l = piece_loss(batch->data, batch->target);
          l.backward();
          loss = l.detach();
        }
        if (!graph_step) {
          if (ddp) ddp->synchronize();  // at once: backward's last gradient completed the exchange
          opt->step();
          if (after_step) after_step();
          loss_sum = add(loss_sum, mul(loss.to(kFloat64), Scalar(static_cast<double>(n))));
          correct = add(correct, correct_in_step);
        }
        seen += n;
        ++step;
        if (first_step_done++) raw_allocs_after_first += mem.stats().num_device_alloc - raw_before;
        if (!c.memory_snapshot.empty() && e == first_epoch && step == c.memory_snapshot_steps)
          write_snapshot("the first " + std::to_string(step) + " steps", tty);
        if (tty && (step % 20 == 0 || seen == loader.dataset_size()))
          progress(e, shown_epochs, step, loader.batches_per_epoch(), loss_sum.item<double>() / static_cast<double>(seen));
      }
      // The epoch's last results arrive when the device has done its work: read them first.
      double epoch_loss_sum = loss_sum.item<double>();
      int64_t epoch_correct = correct.item<int64_t>();
      if (pg) {  // the epoch's figures over all ranks
        Tensor t = tensor({epoch_loss_sum, static_cast<double>(seen), static_cast<double>(epoch_correct)},
                          {kFloat64, Device::cpu()});
        pg->all_reduce(t)->wait();
        const auto v = t.to_vector<double>();
        epoch_loss_sum = v[0];
        seen = static_cast<int64_t>(v[1]);
        epoch_correct = static_cast<int64_t>(v[2]);
      }
      const double secs = seconds_since(t0);
      epoch_seconds.push_back(secs);
      train_time += secs;
      samples += seen;
      last_loss = epoch_loss_sum / static_cast<double>(std::max<int64_t>(seen, 1));
      if (tty) std::printf("\n");
      // Before evaluation and the checkpoint: a run that diverged stops, and the last
      // checkpoint it wrote stays the last good one (every rank sees the same loss).
      EMBER_CHECK(std::isfinite(last_loss), "training diverged: the mean loss of epoch ", e + 1, " is ", last_loss,
                  " (--lr ", c.lr, " with ", c.optimizer, "; a smaller --lr, or --precision fp32, may train); ",
                  c.save.empty() ? std::string("nothing was saved")
                                 : "the last checkpoint in " + c.save + " is from before it");
      epoch_loss.push_back(last_loss);
      // Evaluated after the epoch's clock stopped: epoch_seconds is training alone.
      if (c.profiling()) stop_op_profiler();
      epoch_accuracy.push_back(test_accuracy());
      if (c.profiling()) start_op_profiler(/*resume=*/true);
      if (lead)
        std::printf("epoch %lld/%lld: loss %.4f, train accuracy %.2f%%, test accuracy %.2f%%, %.0f samples/s, %.2f s\n",
                  static_cast<long long>(e + 1), static_cast<long long>(shown_epochs), last_loss,
                  100.0 * static_cast<double>(epoch_correct) / static_cast<double>(std::max<int64_t>(seen, 1)),
                  100.0 * epoch_accuracy.back(), static_cast<double>(seen) / secs, secs);
      auto* zero = dynamic_cast<comm::ZeroOptimizer*>(opt.get());
      if (zero && e == first_epoch && lead && !c.json) std::printf("%s\n", zero->memory_summary().c_str());
      if (zero && !c.save.empty()) zero->consolidate_state_dict();  // a collective: every rank
      if (!c.save.empty() && lead && !after_step)
        optim::save_checkpoint(c.save, *model, opt.get(), {{"model", model_name}, {"epoch", std::to_string(e + 1)}});
      if (!c.save.empty() && !after_step) crash_after_checkpoint_for_tests(launch, pg.get());
    };
    for (int64_t e = first_epoch; e < c.epochs; ++e) train_epoch(e);
    // --prune: prune the trained Linear weights, fine-tune one epoch holding the masks
    // (layers/prune.h), then run every Linear in CSR form (layers/sparse.h) and evaluate that.
    nlohmann::json prune_report;
    if (c.prune > 0) {
      const nn::WeightMemory before = nn::weight_memory(*model);
      const double trained = epoch_accuracy.empty() ? test_accuracy() : epoch_accuracy.back();
      const nn::Pruning pruning(*model, {.sparsity = c.prune});
      const double pruned = test_accuracy();
      if (lead)
        std::printf("pruned %.1f%% of the Linear weights (global magnitude): test accuracy %.2f%%, fine-tuning one "
                    "epoch\n", 100.0 * pruning.sparsity(), 100.0 * pruned);
      after_step = [&pruning] { pruning.apply(); };
      shown_epochs = c.epochs + 1;
      train_epoch(c.epochs);
      const double finetuned = epoch_accuracy.back();
      model = nn::sparsify(model);
      const double sparse = test_accuracy();
      epoch_accuracy.back() = sparse;
      const nn::WeightMemory after = nn::weight_memory(*model);
      if (lead) {
        std::printf("Linear weights: %s dense, %s as CSR (values + indices: %.2fx smaller), + %s of transposed "
                    "indices for training\n",
                    memory::format_bytes(before.stored_bytes).c_str(), memory::format_bytes(after.stored_bytes).c_str(),
                    static_cast<double>(before.stored_bytes) / static_cast<double>(after.stored_bytes),
                    memory::format_bytes(after.sparse_backward_index_bytes).c_str());
        std::printf("test accuracy: trained %.2f%%, pruned %.2f%%, fine-tuned %.2f%%, as CSR layers %.2f%%\n",
                    100.0 * trained, 100.0 * pruned, 100.0 * finetuned, 100.0 * sparse);
      }
      prune_report = {{"sparsity", pruning.sparsity()},
                      {"accuracy_trained", trained},
                      {"accuracy_pruned", pruned},
                      {"accuracy_finetuned", finetuned},
                      {"accuracy_sparse", sparse},
                      {"weight_bytes_dense", before.stored_bytes},
                      {"weight_bytes_sparse", after.stored_bytes},
                      {"sparse_backward_index_bytes", after.sparse_backward_index_bytes}};
    }
    if (c.profiling()) finish_profile(c, lead, train_time);
    if (!c.memory_snapshot.empty() && c.memory_snapshot_steps == 0) write_snapshot("the whole run", false);
    const double accuracy = epoch_accuracy.empty() ? test_accuracy() : epoch_accuracy.back();
    if (pg) pg->barrier()->wait();  // rank 0 serves the store: it leaves last
    if (lead) std::printf("test accuracy %.2f%%\n", 100.0 * accuracy);
    if (c.json && lead) {
      nlohmann::json j = {{"model", model_name},
                          {"test_accuracy", accuracy},
                          {"train_loss", last_loss},
                          {"epoch_seconds", epoch_seconds},
                          {"epoch_test_accuracy", epoch_accuracy},
                          {"epoch_train_loss", epoch_loss},
                          {"train_samples_per_s", train_time > 0 ? static_cast<double>(samples) / train_time : 0.0},
                          {"peak_memory_bytes", memory_stats(device).at("allocated_bytes.all.peak")},
                          {"peak_reserved_bytes", memory_stats(device).at("reserved_bytes.all.peak")},
                          {"step_peak_bytes", memory_stats(device).at("allocated_bytes.all.peak") - data_bytes},
                          {"checkpoint", c.checkpoint},
                          {"cuda_graph_replays", graph_step ? graph_step->replays() : 0},
                          {"precision", c.precision},
                          {"tf32", c.tf32},
                          {"image_size", c.image_size},
                          {"raw_allocs_after_first_step", raw_allocs_after_first},
                          {"micro_batch", micro_batch},
                          {"microbatch_retries", retries},
                          {"device", device.str()},
                          {"threads", get_num_threads()},
                          {"cpu_isa", cpu_vector_isa()},
                          {"seed", c.seed},
                          {"world_size", world}};
      if (!prune_report.is_null()) j["prune"] = prune_report;
      std::printf("%s\n", j.dump().c_str());
    }
  } catch (...) {  // Note [Errors leave programs on one line] (base/program.h)
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", detail::program_name(), detail::describe(std::current_exception()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace ember::examples
