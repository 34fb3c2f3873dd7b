// The calibrated model of a kernel's H200 time from the CUDA emulator's profile counters
// (kernels/emu/profile.h): a roofline whose ceilings are fitted to measured GPU runs
// (bench/calibration/h200.json) by scripts/kernel-model.py, which writes the parameters
// (bench/calibration/h200_model.txt) and reports the model's leave-one-out error. The
// formula is written twice, here and in that script; docs/kernel-speed.md, "Predicted time".
//
//   time = launches x floor + ||DRAM, L2, in flight, issue, shared, math||_p, where the
//   p-norm (p fitted) is a smooth max: the phases of a kernel partly overlap, and
//   DRAM      = unique bytes read / read bandwidth + unique bytes written / write bandwidth
//   L2        = (load sectors missing the L1 model + store and atomic sectors) x 32 / L2
//               bandwidth (profile.h: a block's re-reads that fit its L1 share are hits)
//   in flight = DRAM bytes x latency / (SMs x resident warps x bytes a warp request moves)
//               (Little's law: what the resident warps keep in flight, one request each;
//               loads per burst, the host compiler's order of a thread's loads, made the
//               leave-one-out error worse, 43% against 32%: not used)
//   issue     = global requests / (SMs x requests an SM issues a us)
//   shared    = shared-memory wavefronts / (SMs x wavefronts an SM serves a us)
//   (L2, issue and shared leave out bf16 mma.sync kernels: the emulator's tensor-core
//   models move memory lane by lane, not as the hardware does)
//   math      = FLOPs / (the rate of the kernel's kind, f32 FMA or bf16 mma.sync, times
//               min(1, resident warps / the warps the rate needs))
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace ember::bench {

inline constexpr int kH200Sms = 132;

// One kernel's counters over a whole run (every launch of the row), scaled to its operands.
struct KernelCounters {
  double read_bytes = 0, write_bytes = 0;  // unique: the compulsory DRAM traffic
  double sectors = 0;                      // global sectors the requests touch
  double l2_sectors = 0;                   // of them, loads missing the L1 model, stores, atomics
  double requests = 0;                     // global load, store and atomic requests
  double wavefronts = 0;                   // shared-memory wavefronts
  double flops = 0;
  int flop_kind = 0;                       // 0: f32 FMA, 1: bf16 mma.sync
  double warps_per_sm = 64;                // resident: occupancy, or fewer when the grid is small
  double bytes_per_request = 128;          // global bytes the lanes ask for, per request
  double loads_per_burst = 1;              // a thread's loads with no store between (profile.h)
  int launches = 1;                        // kernel launches of the row
  double warp_basic_blocks = 0;            // the host compiler's basic blocks a warp ran (profile.h)
  double warp_divisions_64 = 0;            // integer divides a warp ran, of 64-bit operands (profile.h)
  double warp_divisions_32 = 0;            // and of narrower ones
};

struct ModelParams {
  bool loaded = false;
  double floor_us = 2, read_gbs = 4000, write_gbs = 4000, l2_gbs = 10000, latency_us = 1;
  double issue_per_us = 2000, wavefronts_per_us = 2000, f32_tflops = 50, bf16_tflops = 600, math_warps = 16;
  double divisions_per_us = 113;  // warp 64-bit divides an SM runs a us
  double smooth_p = 4;
  // From the same GPU run: the device-to-device copy (the "of copy" ceiling) and cuBLAS.
  double copy_gbs = 4077, cublas_sgemm_4096_us = 2727.5;
  std::string source;  // the run the parameters were fitted on
};

// Reads "key value" lines (# comments) as scripts/kernel-model.py writes them.
inline ModelParams load_model(const std::string& path) {
  ModelParams p;
  std::ifstream in(path);
  std::map<std::string, double*> keys = {
      {"floor_us", &p.floor_us},         {"read_gbs", &p.read_gbs},
      {"write_gbs", &p.write_gbs},       {"l2_gbs", &p.l2_gbs},
      {"latency_us", &p.latency_us},     {"issue_per_us", &p.issue_per_us},
      {"wavefronts_per_us", &p.wavefronts_per_us}, {"math_warps", &p.math_warps},
      {"f32_tflops", &p.f32_tflops},     {"bf16_tflops", &p.bf16_tflops},
      {"divisions_per_us", &p.divisions_per_us}, {"smooth_p", &p.smooth_p},
      {"copy_gbs", &p.copy_gbs},         {"cublas_sgemm_4096_us", &p.cublas_sgemm_4096_us}};
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# source:", 0) == 0) p.source = line.substr(10);
    if (line.empty() || line[0] == '#') continue;
    std::istringstream f(line);
    std::string key;
    double value = 0;
    if (f >> key >> value)
      if (auto it = keys.find(key); it != keys.end()) *it->second = value, p.loaded = true;
  }
  return p;
}

struct Prediction {
  double us = 0;
  const char* bound = "";  // the largest term
};

inline Prediction predict(const KernelCounters& c, const ModelParams& p) {
  const double warps = std::max(c.warps_per_sm, 1.0);
  const double dram = c.read_bytes / (p.read_gbs * 1e3) + c.write_bytes / (p.write_gbs * 1e3);
  // A bf16 mma.sync kernel keeps only its DRAM bytes and FLOPs. Its counters are the
  // instructions' now (Note [Modelled instructions], kernels/emu/profile.cpp), but the L2
  // and issue rates are fitted on SIMT kernels (the L2 at its 4.8 TB/s floor): at them the
  // GEMM's cp.async sectors alone would take longer than it was measured to
  // (docs/kernel-speed.md, "Predicted time").
  const bool tc = c.flop_kind == 1;
  const double l2 = (tc ? 0 : 32 * c.l2_sectors) / (p.l2_gbs * 1e3);
  const double flight =
      (c.read_bytes + c.write_bytes) * p.latency_us / (kH200Sms * warps * std::max(c.bytes_per_request, 1.0));
  const double issue = (tc ? 0 : c.requests) / (kH200Sms * p.issue_per_us);
  const double shared = (tc ? 0 : c.wavefronts) / (kH200Sms * p.wavefronts_per_us);
  const double math = c.flops / ((c.flop_kind == 1 ? p.bf16_tflops : p.f32_tflops) * 1e6 *
                                 std::min(1.0, warps / p.math_warps));
  const double terms[] = {dram, l2, flight, issue, shared, math};
  const char* names[] = {"DRAM", "L2 sectors", "in flight", "issue", "shared", "math"};
  Prediction r{dram, names[0]};
  for (int i = 1; i < 6; ++i)
    if (terms[i] > r.us) r = {terms[i], names[i]};
  // The p-norm, scaled by the largest term (no overflow at a large p).
  const double top = std::max(r.us, 1e-30);
  double sum = 0;
  for (double t : terms) sum += std::pow(t / top, p.smooth_p);
  // The 64-bit divides of the index arithmetic come before the loads whose addresses they
  // compute: they add to the overlapped terms (Note [Divisions], kernels/emu/division_sites.cpp).
  const double divides = c.warp_divisions_64 / (kH200Sms * p.divisions_per_us);
  if (divides > r.us) r.bound = "divides";
  r.us = p.floor_us * std::max(c.launches, 1) + top * std::pow(sum, 1 / p.smooth_p) + divides;
  return r;
}

}  // namespace ember::bench
