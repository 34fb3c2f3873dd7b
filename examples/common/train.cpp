#include "examples/common/train.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "comm/ddp.h"
#include "comm/rendezvous.h"
#include "comm/zero.h"
#include "core/atomic_file.h"
#include "data/dataset.h"
#include "data/prefetch.h"
#include "data/sampler.h"
#include "examples/common/graph_step.h"
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
  EMBER_CHECK(!c.profile, "--cuda-graph: not with --profile (a replay is one launch; the op profiler times ops as "
              "they are queued)");
}

// --estimate-memory: the model built on the meta device, one step estimated, nothing allocated.
void print_memory_estimate(const TrainConfig& c, Device device, int64_t batch, int world,
                           const std::function<std::shared_ptr<nn::Module>()>& make_model) {
  const Device saved = default_device();
  set_default_device(Device::meta());
  std::shared_ptr<nn::Module> model;
  try {
    model = make_model();
  } catch (...) {
    set_default_device(saved);
    throw;
  }
  set_default_device(saved);
  const optim::MemoryEstimateOptions options{.target = device,
                                             .autocast = c.precision == "bf16" ? std::optional(kBFloat16) : std::nullopt,
                                             .checkpoint = c.checkpoint,
                                             .optimizer = c.optimizer,
                                             // ZeRO: each rank's share of the state (and at stage 2, the gradients)
                                             .optimizer_state_shards = c.zero > 0 ? world : 1,
                                             .gradient_shards = c.zero == 2 ? world : 1};
  const Shape input{batch, 1, c.image_size, c.image_size};
  const optim::MemoryEstimate est = optim::memory_estimate(*model, input, options);
  const std::size_t capacity =
      c.device_memory.empty() ? device_allocator(device).memory_limit() : parse_memory_size(c.device_memory, device);
  const int64_t fits = optim::max_batch_that_fits(*model, input, capacity, options);
  std::printf("%s", est.str().c_str());
  std::printf("largest batch that fits in %s: %lld\n", memory::format_bytes(capacity).c_str(),
              static_cast<long long>(fits));
  if (c.json) {
    nlohmann::json j = nlohmann::json::parse(est.json());
    j["max_batch_that_fits"] = fits;
    j["capacity_bytes"] = capacity;
    j["precision"] = c.precision;
    j["checkpoint"] = c.checkpoint;
    std::printf("%s\n", j.dump().c_str());
  }
}

}  // namespace

void line_buffered_stdout() { std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ); }

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
  app.add_option("--epochs", c.epochs, "epochs in all (a resumed run trains the remaining ones)")->capture_default_str();
  app.add_option("--batch-size", c.batch_size, "samples per step")->capture_default_str();
  app.add_option("--lr", c.lr, "learning rate")->capture_default_str();
  app.add_option("--optimizer", c.optimizer, "sgd, adam or adamw")->capture_default_str();
  app.add_option("--seed", c.seed, "seed of the initialisation and the shuffle")->capture_default_str();
  app.add_option("--threads", c.threads, "CPU threads (default: EMBER_NUM_THREADS or all cores)");
  app.add_option("--limit-train", c.limit_train, "use only the first N training images");
  app.add_option("--limit-test", c.limit_test, "evaluate on the first N test images only");
  app.add_option("--save", c.save, "write a checkpoint here after every epoch");
  app.add_option("--resume", c.resume,
                 "continue from this checkpoint; a missing one is an error, except under ember-run or torchrun "
                 "--max-restarts K > 0 when --save names the same file (not written yet: start from the beginning)");
  app.add_flag("--tf32", c.tf32,
               "let float32 matmul, linear and conv2d on a CUDA GPU use TF32 tensor cores (10-bit mantissa "
               "products, as PyTorch's allow_tf32); no effect on the cpu or the emulated device");
  app.add_flag("--json", c.json, "end with one JSON line of results");
  app.add_flag("--profile", c.profile, "print the time each kernel took in training, as a table");
  app.add_option("--max-memory", c.max_memory,
                 "memory training may allocate on the device beyond what it starts with (the dataset, on the "
                 "cpu): bytes, a size such as 64MiB or 2GiB, or a share of the device such as 50%");
  app.add_option("--zero", c.zero,
                 "with several processes: 1 shards the optimizer state across them, 2 the gradients too (ZeRO)")
      ->check(CLI::Range(0, 2))
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
  app.add_option("--prune", c.prune,
                 "after training, prune this share of the Linear weights (smallest magnitudes, one global "
                 "threshold), fine-tune one epoch with the pruned weights held at zero, then run and evaluate the "
                 "layers in sparse CSR form; reports accuracy and weight memory before and after");
  app.add_option("--memory-snapshot", c.memory_snapshot,
                 "write the memory of the first training steps here (JSON for ember-memviz; *.trace.json: a "
                 "Chrome/Perfetto trace)");
  app.add_option("--memory-snapshot-steps", c.memory_snapshot_steps,
                 "the steps --memory-snapshot covers (0: the whole run, written at the end)")
      ->capture_default_str();
}

void add_image_size_flag(CLI::App& app, TrainConfig& c) {
  app.add_option("--image-size", c.image_size,
                 "resize the images to N x N pixels (bilinear) when they are loaded: smaller activations, "
                 "less memory")
      ->check(CLI::Range(4, 28))
      ->capture_default_str();
}

int train_main(const std::string& model_name, const TrainConfig& c,
               const std::function<std::shared_ptr<nn::Module>()>& make_model) {
  try {
    EMBER_CHECK(c.epochs >= 0 && c.batch_size > 0, "flags: --epochs must be >= 0 and --batch-size > 0");
    // The checkpoint is written after the first epoch: an unwritable path fails now, not then.
    if (!c.save.empty()) check_can_write(c.save, "--save");
    if (c.threads > 0) set_num_threads(c.threads);
    if (c.tf32) set_allow_tf32(true);
    // Under ember-run (or torchrun, srun, mpirun) with several processes: data-parallel
    // training. --batch-size stays the global batch; each rank takes its share of every
    // step (DistributedSampler), DDP averages the gradients, rank 0 alone prints and saves.
    const comm::LaunchInfo launch = comm::launch_info_from_env();
    const int world = launch.world_size;
    std::shared_ptr<comm::ProcessGroup> pg;
    if (world > 1) {
      EMBER_CHECK(c.batch_size % world == 0, "--batch-size ", c.batch_size, " must divide evenly among the ", world,
                  " processes (each takes batch-size / ", world, " samples of every step)");
      pg = comm::init_process_group(launch);
    }
    EMBER_CHECK(c.prune >= 0 && c.prune <= 1, "--prune: sparsity must lie in [0, 1], got ", c.prune);
    EMBER_CHECK(!(pg && c.prune > 0), "--prune: runs in one process only");
    const bool lead = launch.rank == 0;
    const int64_t rank_batch = c.batch_size / world;

    // With several processes each takes its own device, cuda:LOCAL_RANK (torchrun's
    // convention): --device cuda means that, and auto means it when this node has a CUDA
    // device for each of its processes (comm::local_device), else the CPU.
    std::string dev = c.device;
    Device device;
    if (pg && (dev == "auto" || dev == "cuda")) {
      device = dev == "auto" ? comm::local_device(launch) : Device::cuda(launch.local_rank);
    } else {
      if (dev == "auto") {
        dev = default_device_name();
        if (dev == "cpu" && lead) std::printf("no CUDA device found: training on the cpu\n");
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

    check_cuda_graph_flags(c, device, world);
    if (c.estimate_memory) {  // every rank's step is alike: rank 0 prints it
      if (lead) print_memory_estimate(c, device, rank_batch, world, make_model);
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
      first_epoch = std::stoll(meta.at("epoch"));
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
    if (!c.max_memory.empty()) {
      const std::size_t budget = parse_memory_size(c.max_memory, device);
      mem.empty_cache();
      mem.set_memory_limit(static_cast<std::size_t>(mem.stats().reserved_bytes[memory::kAllPools].current) + budget);
    }
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
    if (c.profile) start_op_profiler();
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
      if (tty) std::printf("\n");
      epoch_seconds.push_back(secs);
      train_time += secs;
      samples += seen;
      last_loss = epoch_loss_sum / static_cast<double>(std::max<int64_t>(seen, 1));
      epoch_loss.push_back(last_loss);
      // Evaluated after the epoch's clock stopped: epoch_seconds is training alone.
      if (c.profile) stop_op_profiler();
      epoch_accuracy.push_back(test_accuracy());
      if (c.profile) start_op_profiler(/*resume=*/true);
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
    if (c.profile && lead) std::printf("%s", format_op_profile(stop_op_profiler(), train_time).c_str());
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
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace ember::examples
