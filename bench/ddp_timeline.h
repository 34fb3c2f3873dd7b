// A small model of one DDP step at N ranks, from one rank's measured (or estimated)
// timeline: forward, backward with the time each gradient bucket became ready, optimizer.
// Used by bench_ddp.cpp; header-only, no ember dependency, so the arithmetic is easy to
// check by hand (check_timeline_model() does, at the bench's start).
//
// Note [DDP timeline model].
//   ring all-reduce of a bucket of S bytes at N ranks:  t(S) = alpha + S · 2(N-1)/N / busbw
//   (busbw as nccl-tests defines it; alpha a per-collective latency). Buckets are issued in
//   order, one at a time (NCCL and ember's Gloo worker both run collectives in issue order):
//     start_k = max(ready_k, end_{k-1}),  end_k = start_k + t(S_k),  end_{-1} = 0
//   where ready_k is the time after backward began at which bucket k's last gradient was
//   accumulated. With overlap the exchange ends at end_last; without (every bucket after
//   backward) at backward + sum_k t(S_k). A step then takes
//     T(N) = forward + max(backward, exchange end) + optimizer,   T(1) = forward + backward + optimizer,
//   and the scaling efficiency (samples/s per rank at N over one rank's, the per-rank batch
//   fixed) is T(1) / T(N). What it leaves out: compute slowed by communication sharing the
//   GPU's SMs and memory (NCCL kernels take some SMs), stragglers, the data loader, and
//   alpha's growth with N (the caller picks alpha per configuration).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace ember::bench {

struct BucketTime {
  double bytes = 0;
  double ready_s = 0;  // after backward began
};

struct StepTimeline {
  double forward_s = 0, backward_s = 0, optimizer_s = 0;
  std::vector<BucketTime> buckets;  // in all-reduce order
  double single_rank_s() const { return forward_s + backward_s + optimizer_s; }
};

struct Link {
  double busbw_bytes_per_s;
  double alpha_s;
};

inline double allreduce_seconds(double bytes, int ranks, const Link& link) {
  if (ranks <= 1) return 0;
  return link.alpha_s + bytes * 2.0 * (ranks - 1) / ranks / link.busbw_bytes_per_s;
}

struct Prediction {
  double comm_s = 0;          // sum of the buckets' all-reduce times
  double exchange_end_s = 0;  // after backward began
  double step_s = 0;          // T(N)
  double efficiency = 0;      // T(1) / T(N)
};

// overlap = false: every bucket's all-reduce waits for the end of backward.
inline Prediction predict_step(const StepTimeline& tl, int ranks, const Link& link, bool overlap) {
  Prediction p;
  double end = overlap ? 0.0 : tl.backward_s;
  for (const BucketTime& b : tl.buckets) {
    const double t = allreduce_seconds(b.bytes, ranks, link);
    p.comm_s += t;
    end = std::max(overlap ? b.ready_s : tl.backward_s, end) + t;
  }
  p.exchange_end_s = end;
  p.step_s = tl.forward_s + std::max(tl.backward_s, end) + tl.optimizer_s;
  p.efficiency = tl.single_rank_s() / p.step_s;
  return p;
}

// The worked example of Note [DDP timeline model], checked at the bench's start: two
// buckets of 1e6 and 2e6 bytes ready at 1 ms and 3 ms of a 4 ms backward (forward 2 ms,
// optimizer 1 ms: T(1) = 7 ms); N = 2, busbw 1 GB/s, alpha 0.5 ms:
//   t0 = 0.5 + 1e6·1/1e9 s = 1.5 ms: runs 1.0 -> 2.5 ms;  t1 = 0.5 + 2 = 2.5 ms: runs 3.0 -> 5.5 ms
//   overlap: T(2) = 2 + max(4, 5.5) + 1 = 8.5 ms;  no overlap: exchange ends 4 + 1.5 + 2.5 = 8 ms, T(2) = 11 ms.
inline void check_timeline_model() {
  const StepTimeline tl{2e-3, 4e-3, 1e-3, {{1e6, 1e-3}, {2e6, 3e-3}}};
  const Link link{1e9, 0.5e-3};
  const Prediction a = predict_step(tl, 2, link, true), b = predict_step(tl, 2, link, false);
  auto near = [](double x, double y) { return std::fabs(x - y) < 1e-12; };
  if (!near(a.exchange_end_s, 5.5e-3) || !near(a.step_s, 8.5e-3) || !near(b.step_s, 11e-3) || !near(a.comm_s, 4e-3) ||
      !near(a.efficiency, 7.0 / 8.5) || predict_step(tl, 1, link, true).efficiency != 1.0) {
    std::fprintf(stderr, "bench_ddp: the timeline model's worked example fails (ddp_timeline.h)\n");
    std::abort();
  }
}

}  // namespace ember::bench
