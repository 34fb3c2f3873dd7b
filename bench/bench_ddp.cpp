// DDP scaling: one rank's step timeline per gradient bucket, the scaling it predicts at 8,
// 64 and 512 H200s (Note [DDP timeline model] in bench/ddp_timeline.h), and the scaling
// measured here with Gloo (N ranks as threads ÷ N × one rank).
//
// 1. Timeline. For the MLP example's model, the CNN example's and a larger MLP (784, four
//    hidden layers of 4096, 10), one training step (forward, cross-entropy, backward, Adam)
//    with DistributedDataParallel's default buckets (comm::assign_buckets, 1 MiB first,
//    25 MiB after). A post-accumulate grad hook on every parameter (the hook DDP uses)
//    stamps the time its gradient is ready: the host clock on the CPU, a CUDA event on
//    --device cuda (read after a synchronize). A bucket is ready when its last gradient
//    is. Median over --steps steps after 2 warm-ups. World size 1 and no DDP: DDP would
//    add one copy per gradient into its bucket, and at one rank no exchange.
// 2. The prediction at N ranks, with the overlap and with every bucket after backward,
//    from the measured times and from H200 times estimated from FLOPs (labelled so).
// 3. Measured scaling with Gloo: N ranks as threads of this process (one core each, the
//    in-process store, loopback TCP) with a fixed per-rank batch; samples/s at N over N
//    times one rank's.
//
// Usage: ember_bench_ddp [--device cpu|cuda] [--batch B] [--steps S] [--scaling-steps S]
//                        [--ranks N] [--gpu-efficiency F]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/ddp_timeline.h"
#include "comm/ddp.h"
#include "comm/process_group.h"
#include "comm/store.h"
#include "core/ops.h"
#include "core/random.h"
#include "core/runtime.h"
#include "core/stream.h"
#include "layers/functional.h"
#include "layers/layers.h"
#include "optim/optimizer.h"

using namespace ember;
using bench::BucketTime;
using bench::Link;
using bench::StepTimeline;
using Clock = std::chrono::steady_clock;

namespace {

// H200 SXM figures for the FLOP-based estimate (NVIDIA's H200 datasheet): FP32 67 TFLOP/s
// (no tensor cores: ember keeps float32 GEMMs in float32 unless set_allow_tf32; TF32 tensor
// cores would give 495 dense), HBM3e 4.8 TB/s.
constexpr double kH200Fp32 = 67e12, kH200Hbm = 4.8e12;

// One configuration of the prediction. busbw figures from nccl-tests all_reduce_perf:
//  - NVLink, 8 GPUs: 476 GB/s busbw at large sizes on 8x H100 SXM (NVLink 4, NVSwitch),
//    called "in the expected range for H100" by NVIDIA (github.com/NVIDIA/nccl-tests
//    issue 290, 2025-03); docs.alayanew.com's nccl-tests guide (2026-05) gives 460-480
//    for 8x H100 SXM5. The HGX H200 has the same NVLink 4 (900 GB/s per GPU): 470 GB/s.
//  - InfiniBand NDR, 400 Gb/s per GPU (50 GB/s line rate): NVIDIA expects 46-48 GB/s
//    per NIC through NCCL (same issue 290): 48 GB/s is the bound when a ring's bytes all
//    pass one GPU's NIC. NCCL's rings use all 8 NICs of a node at once, so multi-node
//    busbw can reach several times that: 350 GB/s over 8 nodes x 8 H100 (github.com/
//    uccl-project/uccl issue 205, 2025-07); ~470 GB/s expected for 2 x 8 x 400G
//    (github.com/NVIDIA/nccl issue 2409). Both IB figures are printed.
//  - alpha (per-collective latency): assumed, the order of nccl-tests' small-message
//    all-reduce times: 20 us in one node, 50 us at 64 GPUs, 100 us at 512 (tree algorithms
//    keep it logarithmic in the node count). It matters only for the small buckets here.
struct Config {
  const char* name;
  int ranks;
  Link link;
};
const Config kConfigs[] = {
    {"8 H200, NVLink", 8, {470e9, 20e-6}},          {"64 H200, IB 1 NIC", 64, {48e9, 50e-6}},
    {"64 H200, IB 8 rails", 64, {350e9, 50e-6}},    {"512 H200, IB 1 NIC", 512, {48e9, 100e-6}},
    {"512 H200, IB 8 rails", 512, {350e9, 100e-6}},
};

// A layer and its forward FLOPs per sample; backward is twice that (gradient of the
// weight and of the input), once for the first layer (its input needs no gradient).
struct Layer {
  std::shared_ptr<nn::Module> module;
  double fwd_flops = 0;
};
struct ModelSpec {
  std::string name;
  std::vector<Layer> layers;
};

Layer linear(int64_t in, int64_t out) { return {std::make_shared<nn::Linear>(in, out), 2.0 * in * out}; }
Layer conv3x3(int64_t in, int64_t out, int64_t hw) {
  return {std::make_shared<nn::Conv2d>(in, out, nn::Pair{3, 3}, nn::Pair{1, 1}, nn::Pair{1, 1}),
          2.0 * out * hw * hw * in * 9};
}
Layer other(std::shared_ptr<nn::Module> m) { return {std::move(m), 0}; }

// The examples' architectures (examples/mlp/main.cpp, examples/cnn/main.cpp) and a larger MLP.
ModelSpec make_spec(const std::string& name) {
  using namespace nn;
  auto relu = [] { return other(std::make_shared<ReLU>()); };
  auto pool = [] { return other(std::make_shared<MaxPool2d>(Pool2dOptions{.kernel_size = {2, 2}})); };
  if (name == "mlp")
    return {name,
            {other(std::make_shared<Flatten>()), linear(784, 512), relu(), linear(512, 256), relu(), linear(256, 10)}};
  if (name == "cnn")
    return {name,
            {conv3x3(1, 32, 28), relu(), pool(), conv3x3(32, 64, 14), relu(), pool(),
             other(std::make_shared<Flatten>()), linear(3136, 128), relu(), linear(128, 10)}};
  ModelSpec s{name, {other(std::make_shared<Flatten>()), linear(784, 4096), relu()}};
  for (int i = 0; i < 3; ++i) s.layers.insert(s.layers.end(), {linear(4096, 4096), relu()});
  s.layers.push_back(linear(4096, 10));
  return s;
}

std::shared_ptr<nn::Sequential> build(const ModelSpec& s) {
  auto seq = std::make_shared<nn::Sequential>();
  for (const Layer& l : s.layers) seq->push_back(l.module);
  return seq;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Measured {
  StepTimeline tl;
  std::vector<std::vector<size_t>> buckets;
  std::vector<std::string> names;
  std::vector<double> bucket_bwd_flops;  // cumulative backward FLOPs when each bucket is ready
  double fwd_flops = 0;
  int64_t params = 0;
};

// Section 1: one rank's timeline on `device`.
Measured measure(const std::string& model_name, Device device, int64_t batch, int steps) {
  manual_seed(1);
  const ModelSpec spec = make_spec(model_name);
  auto model = build(spec);
  model->to(device);
  Measured m;
  std::vector<Tensor> params;
  for (const auto& [name, p] : model->named_parameters()) {
    params.push_back(p);
    m.names.push_back(name);
    m.params += p.numel();
  }
  m.buckets = comm::assign_buckets(params, int64_t(1) << 20, int64_t(25) << 20);

  // Cumulative backward FLOPs up to the end of each parameter's layer (backward runs from the last layer).
  std::map<const void*, double> cum_of_param;
  double cum = 0;
  for (size_t l = spec.layers.size(); l-- > 0;) {
    const Layer& layer = spec.layers[l];
    const bool first =
        std::none_of(spec.layers.begin(), spec.layers.begin() + l, [](const Layer& x) { return x.fwd_flops > 0; });
    cum += layer.fwd_flops * batch * (first ? 1 : 2);
    m.fwd_flops += layer.fwd_flops * batch;
    for (const Tensor& p : layer.module->parameters()) cum_of_param[p.impl_ptr().get()] = cum;
  }
  for (const auto& b : m.buckets) {
    double f = 0;
    for (size_t i : b) f = std::max(f, cum_of_param[params[i].impl_ptr().get()]);
    m.bucket_bwd_flops.push_back(f);
  }

  // Ready stamps: host seconds since backward began (CPU), or events (CUDA).
  struct Stamps {
    Clock::time_point t0;
    std::vector<double> host;
    std::vector<Event> events;
  };
  auto st = std::make_shared<Stamps>();
  st->host.assign(params.size(), 0);
  const bool cuda = device.is_cuda();
  for (size_t i = 0; i < params.size(); ++i) {
    if (cuda) st->events.emplace_back(device, true);
    params[i].register_post_accumulate_grad_hook([st, i, cuda](const Tensor&) {
      if (cuda)
        st->events[i].record();
      else
        st->host[i] = std::chrono::duration<double>(Clock::now() - st->t0).count();
    });
  }
  Event bwd_begin(device, true), bwd_end(device, true);

  optim::Adam opt(params, {.lr = 1e-3});
  Tensor x = randn({batch, 1, 28, 28}, TensorOptions(kFloat32, device));
  Tensor y = randint(0, 10, {batch}, TensorOptions(kInt64, device));
  std::vector<double> fwd, bwd, optim_s;
  std::vector<std::vector<double>> ready(m.buckets.size());
  auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  for (int s = 0; s < steps + 2; ++s) {
    opt.zero_grad();
    synchronize(device);
    auto t = Clock::now();
    Tensor loss = nn::functional::cross_entropy(model->forward(x), y);
    synchronize(device);
    const double f = seconds_since(t);
    t = Clock::now();
    st->t0 = t;
    if (cuda) bwd_begin.record();
    loss.backward();
    if (cuda) bwd_end.record();
    synchronize(device);
    double b = seconds_since(t);
    std::vector<double> r(params.size());
    for (size_t i = 0; i < params.size(); ++i) r[i] = cuda ? bwd_begin.elapsed_ms(st->events[i]) / 1e3 : st->host[i];
    if (cuda) b = bwd_begin.elapsed_ms(bwd_end) / 1e3;
    t = Clock::now();
    opt.step();
    synchronize(device);
    const double o = seconds_since(t);
    if (s < 2) continue;
    fwd.push_back(f);
    bwd.push_back(b);
    optim_s.push_back(o);
    for (size_t k = 0; k < m.buckets.size(); ++k) {
      double rk = 0;
      for (size_t i : m.buckets[k]) rk = std::max(rk, r[i]);
      ready[k].push_back(rk);
    }
  }
  m.tl.forward_s = median(fwd);
  m.tl.backward_s = median(bwd);
  m.tl.optimizer_s = median(optim_s);
  for (size_t k = 0; k < m.buckets.size(); ++k) {
    double bytes = 0;
    for (size_t i : m.buckets[k]) bytes += static_cast<double>(params[i].numel() * params[i].element_size());
    m.tl.buckets.push_back({bytes, std::min(median(ready[k]), m.tl.backward_s)});
  }
  return m;
}

// The same step on an H200, estimated: FLOPs at `eff` of FP32 peak, Adam's 28 bytes per
// parameter (read p, g, m, v; write p, m, v) at `eff` of HBM bandwidth. Launch overheads
// (a few us per kernel) are left out, so these are lower bounds on the times.
StepTimeline h200_estimate(const Measured& m, double eff) {
  StepTimeline tl;
  const double rate = eff * kH200Fp32;
  tl.forward_s = m.fwd_flops / rate;
  tl.optimizer_s = 28.0 * static_cast<double>(m.params) / (eff * kH200Hbm);
  for (size_t k = 0; k < m.tl.buckets.size(); ++k) {
    tl.buckets.push_back({m.tl.buckets[k].bytes, m.bucket_bwd_flops[k] / rate});
    tl.backward_s = std::max(tl.backward_s, m.bucket_bwd_flops[k] / rate);
  }
  return tl;
}

void print_timeline(const std::string& model, const Measured& m, const std::string& where) {
  const auto& tl = m.tl;
  std::printf("\n## %s: %lld parameters, %zu bucket(s); %s\n", model.c_str(), static_cast<long long>(m.params),
              m.buckets.size(), where.c_str());
  std::printf("forward %.3f ms, backward %.3f ms, optimizer (Adam) %.3f ms, one rank's step %.3f ms\n",
              tl.forward_s * 1e3, tl.backward_s * 1e3, tl.optimizer_s * 1e3, tl.single_rank_s() * 1e3);
  std::printf(
      "| bucket | parameters | bytes | ready at (ms into backward) | its share of backward (ms) | est. backward GFLOP "
      "|\n");
  std::printf("|---:|---|---:|---:|---:|---:|\n");
  double prev = 0, prev_flops = 0;
  for (size_t k = 0; k < tl.buckets.size(); ++k) {
    const auto& b = m.buckets[k];
    const std::string span = m.names[b.front()] + (b.size() > 1 ? " .. " + m.names[b.back()] : "");
    std::printf("| %zu | %s (%zu) | %.0f | %.3f | %.3f | %.3f |\n", k, span.c_str(), b.size(), tl.buckets[k].bytes,
                tl.buckets[k].ready_s * 1e3, (tl.buckets[k].ready_s - prev) * 1e3,
                (m.bucket_bwd_flops[k] - prev_flops) / 1e9);
    prev = tl.buckets[k].ready_s;
    prev_flops = m.bucket_bwd_flops[k];
  }
}

void print_prediction(const StepTimeline& tl, const char* label) {
  std::printf("\nprediction from %s (T(1) = %.3f ms):\n", label, tl.single_rank_s() * 1e3);
  std::printf(
      "| configuration | N | busbw GB/s | alpha us | all-reduce total ms | exchange ends (ms into backward) "
      "| T(N) ms | efficiency | T(N) no overlap ms | efficiency no overlap |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Config& c : kConfigs) {
    const auto a = bench::predict_step(tl, c.ranks, c.link, true), n = bench::predict_step(tl, c.ranks, c.link, false);
    std::printf("| %s | %d | %.0f | %.0f | %.3f | %.3f | %.3f | %.1f%% | %.3f | %.1f%% |\n", c.name, c.ranks,
                c.link.busbw_bytes_per_s / 1e9, c.link.alpha_s * 1e6, a.comm_s * 1e3, a.exchange_end_s * 1e3,
                a.step_s * 1e3, 100 * a.efficiency, n.step_s * 1e3, 100 * n.efficiency);
  }
}

// Section 3: samples/s of `ranks` ranks (threads, one core each) with `batch` samples per
// rank; one rank trains without DDP, as one process would.
double samples_per_second(const std::string& model_name, int ranks, int64_t batch, int steps) {
  manual_seed(1);
  std::vector<std::shared_ptr<nn::Sequential>> models;
  std::vector<Tensor> xs, ys;
  for (int r = 0; r < ranks; ++r) {
    models.push_back(build(make_spec(model_name)));
    xs.push_back(randn({batch, 1, 28, 28}));
    ys.push_back(randint(0, 10, {batch}));
  }
  auto store = std::make_shared<comm::InProcessStore>();
  double seconds = 0;
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      SingleThreadedScope single;
      std::shared_ptr<comm::ProcessGroup> pg;
      std::unique_ptr<comm::DistributedDataParallel> ddp;
      if (ranks > 1) {
        pg = std::make_shared<comm::ProcessGroup>(store, r, ranks);
        ddp = std::make_unique<comm::DistributedDataParallel>(models[r], pg);
      }
      optim::Adam opt(models[r]->parameters(), {.lr = 1e-3});
      Clock::time_point t0;
      for (int s = 0; s < steps + 2; ++s) {
        if (s == 2) {
          if (pg) pg->barrier()->wait();
          t0 = Clock::now();
        }
        opt.zero_grad();
        Tensor out = ddp ? ddp->forward(xs[r]) : models[r]->forward(xs[r]);
        nn::functional::cross_entropy(out, ys[r]).backward();
        if (ddp) ddp->synchronize();
        opt.step();
      }
      if (r == 0) seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    });
  for (auto& t : threads) t.join();
  return static_cast<double>(ranks * batch * steps) / seconds;
}

}  // namespace

int main(int argc, char** argv) {
  bench::check_timeline_model();
  std::string device_name = "cpu";
  int64_t batch = 128;
  int steps = 15, scaling_steps = 30, ranks = 2;
  double gpu_eff = 0.5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--device")
      device_name = v;
    else if (a == "--batch")
      batch = std::max<int64_t>(1, std::atoll(v.c_str()));
    else if (a == "--steps")
      steps = std::max(1, std::atoi(v.c_str()));
    else if (a == "--scaling-steps")
      scaling_steps = std::max(0, std::atoi(v.c_str()));
    else if (a == "--ranks")
      ranks = std::max(2, std::atoi(v.c_str()));
    else if (a == "--gpu-efficiency")
      gpu_eff = std::atof(v.c_str());
    else {
      std::fprintf(stderr, "ember_bench_ddp: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  const Device device = Device::parse(device_name);
  std::printf(
      "# DDP step timeline and scaling: device %s, batch %lld per rank, median of %d steps after 2 warm-ups; "
      "%u cores, %d threads\n",
      device.str().c_str(), static_cast<long long>(batch), steps, std::thread::hardware_concurrency(),
      get_num_threads());
  for (const std::string name : {"mlp", "cnn", "mlp-large"}) {
    const Measured m = measure(name, device, batch, name == "mlp-large" ? std::max(3, steps / 2) : steps);
    print_timeline(name, m, "measured on " + device.str());
    print_prediction(m.tl, ("the times measured on " + device.str()).c_str());
    const StepTimeline est = h200_estimate(m, gpu_eff);
    std::printf(
        "\nH200 ESTIMATE (not measured): FLOPs at %.0f%% of 67 TFLOP/s FP32, Adam at %.0f%% of 4.8 TB/s: "
        "forward %.4f ms, backward %.4f ms, optimizer %.4f ms; bucket ready at",
        100 * gpu_eff, 100 * gpu_eff, est.forward_s * 1e3, est.backward_s * 1e3, est.optimizer_s * 1e3);
    for (const auto& b : est.buckets) std::printf(" %.4f", b.ready_s * 1e3);
    std::printf(" ms\n");
    print_prediction(est, "the H200 ESTIMATE");
  }

  if (scaling_steps > 0 && device.is_cpu()) {
    std::printf("\n# Measured with Gloo here: ranks as threads, one core each, batch %lld per rank, %d steps\n",
                static_cast<long long>(batch), scaling_steps);
    std::printf(
        "| model | 1 rank samples/s | %d ranks samples/s | efficiency (N ranks / (N x 1 rank)) "
        "|\n|---|---:|---:|---:|\n",
        ranks);
    for (const std::string name : {"mlp", "cnn"}) {
      const double one = samples_per_second(name, 1, batch, scaling_steps);
      const double n = samples_per_second(name, ranks, batch, scaling_steps);
      std::printf("| %s | %.0f | %.0f | %.1f%% |\n", name.c_str(), one, n, 100 * n / (ranks * one));
    }
  }
  return 0;
}
