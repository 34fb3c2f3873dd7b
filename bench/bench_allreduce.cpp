// All-reduce bandwidth of ember's Gloo process group against Gloo called directly, at 2
// ranks (threads of this process, talking over loopback TCP as separate processes would).
//
// Reports, per size, the median of R timed all-reduces (after 2 warm-ups) and the
// bandwidths nccl-tests defines: algbw = bytes / time, busbw = algbw · 2(n-1)/n (what
// each rank's link carries in a ring all-reduce), and ember's time over raw Gloo's (the
// ratio of the medians, and the median of each alternating pair's ratio). Napkin math:
// loopback TCP on one core moves a few GB/s; Gloo's ring reduces in place, and ember
// adds no copy, so the two should be within 10% at 16 MiB and beyond.
//
// Usage: ember_bench_allreduce [--runs R] [--ranks N]
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/process_group.h"
#include "comm/store.h"
#include "core/ops.h"
#include "core/runtime.h"

using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Times {
  std::vector<double> ember, gloo;
};

// A tiny Gloo all-reduce, as raw Gloo's barrier.
void gloo_barrier(const std::shared_ptr<gloo::Context>& ctx) {
  gloo::AllreduceOptions sync(ctx);
  float one = 1;
  sync.setOutput(&one, 1);
  sync.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
  sync.setTag(1);
  gloo::allreduce(sync);
}

// Rank 0's seconds per all-reduce(sum) of n floats, through ember's process group and
// through Gloo alone (its own store, context and allreduce), alternating call by call
// (and which goes first) so that the machine's load falls on both alike.
Times time_both(int ranks, int64_t n, int runs) {
  auto store = std::make_shared<ember::comm::InProcessStore>();
  gloo::rendezvous::HashStore gloo_store;
  Times times;
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      ember::SingleThreadedScope single;
      ember::comm::ProcessGroup pg(store, r, ranks);
      auto ctx = std::make_shared<gloo::rendezvous::Context>(r, ranks);
      auto dev = gloo::transport::tcp::CreateDevice("127.0.0.1");
      ctx->connectFullMesh(gloo_store, dev);
      ember::Tensor t = ember::ones({n});
      std::vector<float> buf(static_cast<size_t>(n), 1.0f);
      auto run_ember = [&] {
        pg.barrier()->wait();
        const auto t0 = Clock::now();
        pg.all_reduce(t)->wait();
        return std::chrono::duration<double>(Clock::now() - t0).count();
      };
      auto run_gloo = [&] {
        gloo_barrier(ctx);
        const auto t0 = Clock::now();
        gloo::AllreduceOptions opts(ctx);
        opts.setOutput(buf.data(), buf.size());
        opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
        opts.setTag(2);
        gloo::allreduce(opts);
        return std::chrono::duration<double>(Clock::now() - t0).count();
      };
      for (int i = 0; i < runs + 2; ++i) {
        double te, tg;
        if (i % 2 == 0) {
          te = run_ember();
          tg = run_gloo();
        } else {
          tg = run_gloo();
          te = run_ember();
        }
        if (r == 0 && i >= 2) times.ember.push_back(te), times.gloo.push_back(tg);
      }
    });
  for (auto& t : threads) t.join();
  return times;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 101, ranks = 2;  // fewer than about 100 calls left 16 MiB's ratio swinging 0.9-1.2 on 2 shared cores
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--runs")) runs = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--ranks")) ranks = std::max(2, std::atoi(argv[i + 1]));
  }
  std::printf("all_reduce(sum) of float32 at %d ranks (threads, loopback TCP), medians of %d runs alternating ember "
              "and raw Gloo; %u cores\n",
              ranks, runs, std::thread::hardware_concurrency());
  std::printf("%10s %12s %10s %10s %12s %10s %14s\n", "bytes", "ember_us", "algbw_GB/s", "busbw_GB/s", "raw_gloo_us",
              "ember/raw", "median_of_pairs");
  for (int64_t bytes : {int64_t(4) << 10, int64_t(64) << 10, int64_t(1) << 20, int64_t(16) << 20, int64_t(64) << 20}) {
    const int64_t n = bytes / 4;
    const Times t = time_both(ranks, n, runs);
    std::vector<double> pair_ratios;
    for (size_t i = 0; i < t.ember.size(); ++i) pair_ratios.push_back(t.ember[i] / t.gloo[i]);
    const double te = median(t.ember), tg = median(t.gloo);
    const double algbw = static_cast<double>(bytes) / te / 1e9;
    std::printf("%10lld %12.1f %10.3f %10.3f %12.1f %10.2f %14.2f\n", static_cast<long long>(bytes), te * 1e6, algbw,
                algbw * 2.0 * (ranks - 1) / ranks, tg * 1e6, te / tg, median(pair_ratios));
  }
  return 0;
}
