// All-reduce bandwidth of ember's Gloo process group against Gloo called directly, at 2
// ranks (threads of this process, talking over loopback TCP as separate processes would).
//
// Reports, per size, the median of R timed all-reduces (after 2 warm-ups) and the
// bandwidths nccl-tests defines: algbw = bytes / time, busbw = algbw · 2(n-1)/n (what
// each rank's link carries in a ring all-reduce). Napkin math: loopback TCP on one core
// moves a few GB/s; Gloo's ring reduces in place and ember adds no copy, so from 16 MiB
// up, where moving the bytes outweighs a call's fixed costs, ember's time should be within
// 10% of the raw Gloo one.
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

// Rank 0's per-iteration seconds for ember's all_reduce(sum) of n floats.
std::vector<double> time_ember(int ranks, int64_t n, int runs) {
  auto store = std::make_shared<ember::comm::InProcessStore>();
  std::vector<double> times;
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      ember::SingleThreadedScope single;
      ember::comm::ProcessGroup pg(store, r, ranks);
      ember::Tensor t = ember::ones({n});
      for (int i = 0; i < runs + 2; ++i) {
        pg.barrier()->wait();
        const auto t0 = Clock::now();
        pg.all_reduce(t)->wait();
        if (r == 0 && i >= 2) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
    });
  for (auto& t : threads) t.join();
  return times;
}

// The same with Gloo alone: its own in-process store, context and allreduce.
std::vector<double> time_gloo(int ranks, int64_t n, int runs) {
  gloo::rendezvous::HashStore store;
  std::vector<double> times;
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      auto dev = gloo::transport::tcp::CreateDevice("127.0.0.1");
      auto ctx = std::make_shared<gloo::rendezvous::Context>(r, ranks);
      ctx->connectFullMesh(store, dev);
      std::vector<float> buf(static_cast<size_t>(n), 1.0f);
      for (int i = 0; i < runs + 2; ++i) {
        {
          gloo::AllreduceOptions sync(ctx);  // a tiny all-reduce as the barrier
          float one = 1;
          sync.setOutput(&one, 1);
          sync.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
          sync.setTag(1);
          gloo::allreduce(sync);
        }
        const auto t0 = Clock::now();
        gloo::AllreduceOptions opts(ctx);
        opts.setOutput(buf.data(), buf.size());
        opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
        opts.setTag(2);
        gloo::allreduce(opts);
        if (r == 0 && i >= 2) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
    });
  for (auto& t : threads) t.join();
  return times;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 9, ranks = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--runs")) runs = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--ranks")) ranks = std::max(2, std::atoi(argv[i + 1]));
  }
  std::printf("all_reduce(sum) of float32 at %d ranks (threads, loopback TCP), median of %d runs; %u cores\n", ranks,
              runs, std::thread::hardware_concurrency());
  std::printf("%10s %12s %10s %10s %12s %10s\n", "bytes", "ember_us", "algbw_GB/s", "busbw_GB/s", "raw_gloo_us",
              "ember/raw");
  for (int64_t bytes : {int64_t(4) << 10, int64_t(64) << 10, int64_t(1) << 20, int64_t(16) << 20, int64_t(64) << 20}) {
    const int64_t n = bytes / 4;
    const double te = median(time_ember(ranks, n, runs)), tg = median(time_gloo(ranks, n, runs));
    const double algbw = static_cast<double>(bytes) / te / 1e9;
    std::printf("%10lld %12.1f %10.3f %10.3f %12.1f %10.2f\n", static_cast<long long>(bytes), te * 1e6, algbw,
                algbw * 2.0 * (ranks - 1) / ranks, tg * 1e6, te / tg);
  }
  return 0;
}
