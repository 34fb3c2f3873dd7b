// ZeRO's memory and time: peak allocated bytes per rank and median step time for
// unsharded DDP, ZeRO-1 and ZeRO-2 (comm/zero.h), with Adam, at 1, 2 and 4 ranks on the
// CPU (Gloo). Each rank is a process (comm::spawn), so each has its own allocator and its
// peak is its own: parameters, gradients, optimizer state, activations and the
// transient buckets. The peak reported is the largest over the ranks (they differ by
// the padding only); the time is the median of rank 0's steps after 2 warm-ups.
//
// Models: the MLP example's (784-512-256-10, 0.5 M parameters) and a larger MLP
// (784, --layers hidden layers of --hidden, 10; 8 of 1024: 8.2 M parameters) where the
// state's bytes dominate the activations'.
//
// Buckets default to 4 MiB here (DDP's 25 MiB would hold most of the larger model in one
// bucket, and stage 2 saves only what is outside the bucket in flight).
//
// Usage: ember_bench_zero [--batch B (per rank, 32)] [--steps S (7)] [--hidden H (1024)] [--layers L (8)]
//                         [--bucket-mib M (4)] [--ranks 1,2,4]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "comm/ddp.h"
#include "comm/launch.h"
#include "comm/rendezvous.h"
#include "comm/zero.h"
#include "core/memory.h"
#include "core/ops.h"
#include "core/random.h"
#include "layers/functional.h"
#include "layers/layers.h"
#include "optim/optimizer.h"

using namespace ember;
using Clock = std::chrono::steady_clock;

namespace {

std::shared_ptr<nn::Sequential> mlp(const std::vector<int64_t>& widths) {
  auto m = std::make_shared<nn::Sequential>();
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    m->push_back(std::make_shared<nn::Linear>(widths[i], widths[i + 1]));
    if (i + 2 < widths.size()) m->push_back(std::make_shared<nn::ReLU>());
  }
  return m;
}

// One rank's run; rank 0 prints the row.
void run_rank(const std::string& label, const std::vector<int64_t>& widths, int stage, int64_t batch, int steps,
              int64_t bucket_bytes) {
  auto pg = comm::init_process_group_from_env();
  reset_peak_memory_stats();
  manual_seed(1);
  auto model = mlp(widths);
  comm::DistributedDataParallel ddp(model, pg, {.bucket_cap_bytes = bucket_bytes});
  auto adam = [](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(std::move(p), optim::Adam::Options{}); };
  std::unique_ptr<optim::Optimizer> opt;
  if (stage == 0)
    opt = adam(model->parameters());
  else
    opt = std::make_unique<comm::ZeroOptimizer>(ddp, stage, adam);
  Tensor x = randn({batch, widths.front()}), y = randint(0, widths.back(), {batch});
  std::vector<double> times;
  for (int s = 0; s < steps + 2; ++s) {
    pg->barrier()->wait();
    const auto t0 = Clock::now();
    opt->zero_grad();
    nn::functional::cross_entropy(ddp.forward(x), y).backward();
    opt->step();
    if (s >= 2) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  const double peak = static_cast<double>(memory_stats().at("allocated_bytes.all.peak"));
  Tensor m = tensor({peak, times[times.size() / 2]}, kFloat64);
  pg->all_reduce(m, comm::ReduceOp::kMax)->wait();
  if (pg->rank() == 0) {
    const auto v = m.to_vector<double>();
    const char* mode = stage == 0 ? "DDP" : stage == 1 ? "ZeRO-1" : "ZeRO-2";
    std::printf("| %-22s | %d | %-6s | %10.1f | %9.1f |\n", label.c_str(), pg->size(), mode, v[0] / (1 << 20),
                v[1] * 1e3);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 32, hidden = 1024, layers = 8, bucket_mib = 4;
  int steps = 7;
  std::vector<int> ranks{1, 2, 4};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help") {
      std::printf("usage: ember_bench_zero [--batch B] [--steps S] [--hidden H] [--layers L] [--bucket-mib M] "
                  "[--ranks 1,2,4]\n");
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "ember_bench_zero: %s needs a value (see --help)\n", a.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--batch") {
      batch = std::stoll(v);
    } else if (a == "--steps") {
      steps = std::stoi(v);
    } else if (a == "--bucket-mib") {
      bucket_mib = std::stoll(v);
    } else if (a == "--layers") {
      layers = std::stoll(v);
    } else if (a == "--hidden") {
      hidden = std::stoll(v);
    } else if (a == "--ranks") {
      ranks.clear();
      std::stringstream ss(v);
      for (std::string r; std::getline(ss, r, ',');) ranks.push_back(std::stoi(r));
    } else {
      std::fprintf(stderr, "ember_bench_zero: unknown flag %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  // No tensor op before the forks (comm::spawn's requirement): each child makes its own.
  std::printf("# Adam, batch %lld per rank, buckets of %lld MiB, median of %d steps; peak = allocated bytes, max over "
              "ranks\n", static_cast<long long>(batch), static_cast<long long>(bucket_mib), steps);
  std::printf("| model                  | ranks | mode | peak MiB/rank | step ms |\n|---|---|---|---|---|\n");
  std::fflush(stdout);
  std::vector<int64_t> big{784};
  for (int64_t l = 0; l < layers; ++l) big.push_back(hidden);
  big.push_back(10);
  const std::string big_name = "784-" + std::to_string(hidden) + "x" + std::to_string(layers) + "-10";
  const std::vector<std::pair<std::string, std::vector<int64_t>>> models{{"784-512-256-10", {784, 512, 256, 10}},
                                                                         {big_name, big}};
  comm::LaunchOptions lo;
  lo.prefix_output = false;
  for (const auto& [label, widths] : models)
    for (int n : ranks)
      for (int stage = 0; stage <= 2; ++stage) {
        comm::spawn(n, [&](int) { run_rank(label, widths, stage, batch, steps, bucket_mib << 20); }, lo);
      }
  return 0;
}
