// The machinery of ember_bench_cuda_kernels (bench_cuda_kernels.cu, its only includer):
// options, the device arena, the median of cudaEvent-timed launches on a GPU, and the
// table, which on the CUDA emulator gathers each row's profile counters, predicts its H200
// time (bench/kernel_model.h) and holds the counters to a baseline. The rows themselves
// are the .cu file's.
#pragma once

#if defined(EMBER_CUDA_EMULATED)
#include "kernels/cuda/launch.h"  // first: the emulator's qualifiers before any toolkit header
#include <cuda_runtime_api.h>
#else
#include <cuda_runtime.h>
#include <cublas_v2.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#if defined(EMBER_CUDA_EMULATED)
#include "bench/kernel_model.h"
#include "kernels/emu/profile.h"
#endif
#include "kernels/cuda/random.cuh"  // the arena fills operands with uniform draws

namespace ember::bench {


#define CUDA_OK(call)                                                                        \
  do {                                                                                       \
    cudaError_t err_ = (call);                                                               \
    if (err_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(err_));              \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

struct Options {
  double peak_gbs = 4800;
  size_t mib = 256;  // each operand, as the rows are named and run
  // --emulated: the blocks a launch of a larger grid runs (Note [Sampled blocks] in
  // kernels/emu/profile.cpp). Half an H200's SMs: against 264 (2 an SM), every row's
  // counters within 0.17% at --mib 256 (the grid-capped kernels' blocks are alike), at a
  // quarter of the time of the capped rows (the whole table 2 min, not 9).
  long sample_blocks = 66;
  int reps = 20;
  std::string filter;
  bool emulated = false;
  std::string model = EMBER_BENCH_MODEL_FILE, baseline, write_baseline, counters;
};

// Device buffers that live for the whole run.
class Arena {
 public:
  ~Arena() {
    for (void* p : blocks_) cudaFree(p);
  }
  // Floating-point operands hold uniform draws in [0, 1), never zeros (a GPU may run
  // faster on zeros than on data: METHOD.md); the others are zeroed.
  template <class T>
  T* get(size_t n) {
    void* p = nullptr;
    CUDA_OK(cudaMalloc(&p, std::max<size_t>(n * sizeof(T), 1)));
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, __nv_bfloat16>) {
#if defined(EMBER_CUDA_EMULATED)
      // The emulator draws 4 MiB of floats, copied over the rest: the kernels' counters
      // depend on values only in data-dependent branches (argmax, max pool), which any
      // uniform draws take alike, and drawing an operand whole runs the Philox kernel's
      // whole grid on the emulator (the arena's launches are not profiled, so not sampled).
      const size_t drawn = std::min<size_t>(n, size_t(1) << 20);
#else
      const size_t drawn = n;
#endif
      ember::kernels::cuda::uniform(static_cast<T*>(p), int64_t(drawn), 2026 + blocks_.size(), 0, 0.0, 1.0);
      for (size_t done = drawn; done < n; done += std::min(done, n - done))
        CUDA_OK(cudaMemcpy(static_cast<T*>(p) + done, p, std::min(done, n - done) * sizeof(T), cudaMemcpyDeviceToDevice));
      CUDA_OK(cudaDeviceSynchronize());
    } else {
      CUDA_OK(cudaMemset(p, 0, n * sizeof(T)));
    }
    blocks_.push_back(p);
    return static_cast<T*>(p);
  }

 private:
  std::vector<void*> blocks_;
};

inline int64_t floats(size_t mib) { return int64_t(mib) << 20 >> 2; }

#if !defined(EMBER_CUDA_EMULATED)
inline double median_ms(const std::function<void()>& run, int reps) {
  for (int i = 0; i < 3; ++i) run();
  CUDA_OK(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  CUDA_OK(cudaEventCreate(&start));
  CUDA_OK(cudaEventCreate(&stop));
  std::vector<float> ms(size_t(reps), 0.0f);
  for (int i = 0; i < reps; ++i) {
    CUDA_OK(cudaEventRecord(start));
    run();
    CUDA_OK(cudaEventRecord(stop));
    CUDA_OK(cudaEventSynchronize(stop));
    CUDA_OK(cudaEventElapsedTime(&ms[size_t(i)], start, stop));
  }
  CUDA_OK(cudaGetLastError());
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}
#endif

#if defined(EMBER_CUDA_EMULATED)
// --emulated: a row's counters, summed over its launches and scaled to the full operands.
struct RowCounters {
  ember::emu::LaunchProfile sum;  // at the run's operands
  ember::bench::KernelCounters model;
  int launches = 0;
  std::string kernels;  // the row's kernels, by name
};

RowCounters gather(const std::vector<ember::emu::LaunchProfile>& launches, double work_scale, double unique_scale,
                   double flops, int flop_kind) {
  RowCounters r;
  ember::emu::LaunchProfile& s = r.sum;
  double warp_weighted = 0, weight = 0;
  for (const auto& l : launches) {
    s.add_counts(l);
    // Resident warps of an SM: occupancy's, or fewer when the grid at the full operands
    // cannot fill the 132 SMs: the launch's own grid (a bandwidth row runs at them,
    // unique_scale 1), or a GEMM's at a side of 128 scaled as its operands.
    const double threads = double(l.block.x) * l.block.y * l.block.z, warps = std::ceil(threads / 32);
    const double full_blocks = double(l.grid.x) * l.grid.y * l.grid.z * unique_scale;
    const double resident =
        std::min(double(l.occupancy.warps_per_sm), std::ceil(full_blocks / ember::bench::kH200Sms) * warps);
    const double w = double(l.global_requests() + l.shared_wavefronts) + 1;
    warp_weighted += resident * w, weight += w;
    if (r.kernels.find(l.kernel) == std::string::npos) r.kernels += (r.kernels.empty() ? "" : ", ") + l.kernel;
    ++r.launches;
  }
  ember::bench::KernelCounters& m = r.model;
  m.read_bytes = s.unique_read_bytes * unique_scale;
  m.write_bytes = s.unique_write_bytes * unique_scale;
  m.sectors = double(s.global_sectors()) * work_scale;
  m.l2_sectors = double(s.l2_sectors()) * work_scale;
  m.launches = r.launches;
  // A warp runs a block of the code once for its 32 lanes (when they do not diverge).
  m.warp_basic_blocks = double(s.basic_blocks) / 32 * work_scale;
  m.warp_divisions_64 = double(s.divisions_64) / 32 * work_scale;
  m.warp_divisions_32 = double(s.divisions_32) / 32 * work_scale;
  m.requests = double(s.global_requests()) * work_scale;
  m.wavefronts = double(s.shared_wavefronts) * work_scale;
  m.flops = flops, m.flop_kind = flop_kind;
  m.warps_per_sm = weight > 0 ? warp_weighted / weight : 64;
  const double rw_requests = double(s.global_load_requests + s.global_store_requests);
  m.bytes_per_request = rw_requests > 0 ? double(s.global_load_bytes + s.global_store_bytes) / rw_requests : 128;
  m.loads_per_burst = std::max(1.0, s.loads_per_burst());
  return r;
}
#endif

class Table {
 public:
  explicit Table(const Options& o) : o_(o) {
#if defined(EMBER_CUDA_EMULATED)
    model_ = ember::bench::load_model(o.model);
    if (!o.counters.empty()) {
      counters_.open(o.counters);
      counters_ << "kernel\tbytes\tflops\tflop_kind\tread_bytes\twrite_bytes\tsectors\trequests\twavefronts"
                   "\twarps_per_sm\tbytes_per_request\tloads_per_burst\tl2_sectors\tlaunches\twarp_basic_blocks"
                   "\twarp_divisions_64\twarp_divisions_32"
                   "\tld_sectors_per_request"
                   "\tst_sectors_per_request"
                   "\tbank_conflicts_per_request\tunique_over_ideal\tkernels\n";
    }
    if (!o.baseline.empty()) read_baseline(o.baseline);
    if (!o.write_baseline.empty()) {
      baseline_out_.open(o.write_baseline);
      baseline_out_ << "# The emulator's counters of each ember_bench_cuda_kernels row, at --mib " << o.mib
                    << " (tests: the counter baseline).\n# Regenerate after an intended change: "
                       "scripts/kernel-counters-baseline.sh BUILD\n"
                       "# row\tload sectors/ideal sectors\tstore sectors/ideal sectors\tbank conflicts/shared request"
                       "\tunique bytes/ideal bytes\n";
    }
    std::printf("| kernel | moved | predicted | rate | of ceiling | of copy | target (of copy) | bound | counters |\n"
                "|---|---|---|---|---|---|---|---|---|\n");
#else
    std::printf("| kernel | moved | median | rate | of ceiling | of copy | target (of copy) |\n"
                "|---|---|---|---|---|---|---|\n");
#endif
  }
  // A memory-bound kernel that must move `bytes` (at --mib). The first row, the
  // device-to-device copy, is the practical ceiling the "of copy" column (and the targets)
  // divide by. --emulated runs it at those operands, sampled (Options::sample_blocks).
  void bandwidth(const std::string& name, double bytes, double target_pct, const std::function<void()>& run) {
    if (!selected(name)) return;
#if defined(EMBER_CUDA_EMULATED)
    if (name.rfind("cudaMemcpy", 0) == 0) {  // no kernel: the measured copy is the ceiling
      copy_gbs_ = model_.copy_gbs;
      std::printf("| %s | %.0f MB | %.1f us (measured) | %.0f GB/s | %.1f%% | 100.0%% | - | - | - |\n", name.c_str(),
                  bytes / 1e6, bytes / copy_gbs_ / 1e3, copy_gbs_, 100 * copy_gbs_ / o_.peak_gbs);
      return;
    }
    const RowCounters c = profile(run, 1, 1, 0, 0);
    const ember::bench::Prediction p = ember::bench::predict(c.model, model_);
    const double gbs = bytes / p.us / 1e3;
    std::printf("| %s | %.0f MB | %.1f us | %.0f GB/s | %.1f%% | %.1f%% | %s | %s | %s |\n", name.c_str(), bytes / 1e6,
                p.us, gbs, 100 * gbs / o_.peak_gbs, 100 * gbs / copy_gbs_,
                target_pct > 0 ? (std::to_string(int(target_pct)) + "%").c_str() : "-", p.bound,
                describe(c, bytes).c_str());
    record(name, c, bytes, bytes, 0);
#else
    const double ms = median_ms(run, o_.reps), gbs = bytes / ms / 1e6;
    if (copy_gbs_ == 0) copy_gbs_ = gbs;
    std::printf("| %s | %.0f MB | %.1f us | %.0f GB/s | %.1f%% | %.1f%% | %s |\n", name.c_str(), bytes / 1e6,
                ms * 1e3, gbs, 100 * gbs / o_.peak_gbs, 100 * gbs / copy_gbs_,
                target_pct > 0 ? (std::to_string(int(target_pct)) + "%").c_str() : "-");
#endif
    std::fflush(stdout);
  }
  // A compute-bound kernel that must do `flops`; `reference_ms` > 0 adds its ratio.
  // --emulated runs it at a side `run_side` of the named `side` (work ~ side^3, operands ~ side^2).
  double compute(const std::string& name, double flops, const std::string& target, const std::function<void()>& run,
                 double reference_ms = 0, double side_ratio = 1, int flop_kind = 0) {
    if (!selected(name)) return 0;
#if defined(EMBER_CUDA_EMULATED)
    const RowCounters c = profile(run, side_ratio * side_ratio * side_ratio, side_ratio * side_ratio, flops, flop_kind);
    const ember::bench::Prediction p = ember::bench::predict(c.model, model_);
    const double ms = p.us / 1e3, tflops = flops / ms / 1e9;
    if (reference_ms == 0 && name.find("sgemm") != std::string::npos) reference_ms = model_.cublas_sgemm_4096_us / 1e3;
    std::string ratio = reference_ms > 0 ? std::to_string(int(100 * reference_ms / ms + 0.5)) + "% of cuBLAS" : "";
    std::printf("| %s | %.1f GFLOP | %.1f us | %.1f TFLOP/s | %s | | %s | %s | %s |\n", name.c_str(), flops / 1e9,
                p.us, tflops, ratio.c_str(), target.c_str(), p.bound, describe(c, 0).c_str());
    record(name, c, 0, 0, flops);
#else
    const double ms = median_ms(run, o_.reps), tflops = flops / ms / 1e9;
    std::string ratio = reference_ms > 0 ? std::to_string(int(100 * reference_ms / ms + 0.5)) + "% of cuBLAS" : "";
    std::printf("| %s | %.1f GFLOP | %.1f us | %.1f TFLOP/s | %s | | %s |\n", name.c_str(), flops / 1e9, ms * 1e3,
                tflops, ratio.c_str(), target.c_str());
#endif
    std::fflush(stdout);
    return ms;
  }
  // The copy row always runs: the other rows are given as shares of it.
  bool selected(const std::string& name) const {
    return o_.filter.empty() || name.find(o_.filter) != std::string::npos || name.rfind("cudaMemcpy", 0) == 0;
  }
  const Options& options() const { return o_; }
#if defined(EMBER_CUDA_EMULATED)
  // Rows whose counters are worse than the baseline's, with what got worse.
  const std::vector<std::string>& regressions() const { return regressions_; }
#endif

 private:
#if defined(EMBER_CUDA_EMULATED)
  RowCounters profile(const std::function<void()>& run, double work_scale, double unique_scale, double flops,
                      int flop_kind) {
    // EMBER_EMU_PROFILE set: each launch's counters on stderr too.
    static const bool print = std::getenv("EMBER_EMU_PROFILE") != nullptr;
    ember::emu::set_profile("all", print);
    ember::emu::set_profile_sampling(uint64_t(o_.sample_blocks));
    run();
    CUDA_OK(cudaDeviceSynchronize());
    auto launches = ember::emu::take_profiles();
    ember::emu::set_profile_sampling(0);
    ember::emu::set_profile("", false);
    return gather(launches, work_scale, unique_scale, flops, flop_kind);
  }
  // The counters a change that uncoalesces or conflicts makes worse, shape-independent.
  // Sectors per request are printed; the baseline holds sectors over the ideal for the
  // bytes the lanes asked for (1 when coalesced), which a change of access width (4 to 16
  // bytes a lane: 4 to 16 sectors a request) leaves alone, and uncoalescing raises.
  struct Ratios {
    double ld = 0, st = 0, conflicts = 0, unique = 0, ld_excess = 0, st_excess = 0, l1_hits = 0;
  };
  static Ratios ratios(const RowCounters& c, double run_bytes) {
    const auto& s = c.sum;
    const double shared_requests = double(s.shared_load_requests + s.shared_store_requests);
    auto over_ideal = [](uint64_t sectors, uint64_t bytes) { return bytes ? 32.0 * double(sectors) / double(bytes) : 0; };
    return {s.load_sectors_per_request(),
            s.store_sectors_per_request(),
            shared_requests > 0 ? double(s.bank_conflicts()) / shared_requests : 0,
            run_bytes > 0 ? double(s.unique_bytes()) / run_bytes : 0,
            over_ideal(s.global_load_sectors, s.global_load_bytes),
            over_ideal(s.global_store_sectors, s.global_store_bytes),
            s.global_load_sectors ? 1 - double(s.global_load_l1_miss_sectors) / double(s.global_load_sectors) : 0};
  }
  static std::string describe(const RowCounters& c, double run_bytes) {
    const Ratios r = ratios(c, run_bytes);
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "%d launch%s; ld %.1f, st %.1f sect/req, %.0f%% L1 hits, %.0f B/req, %.1f loads/burst; bank conflicts %.2f/req; unique/ideal %.2f; "
                  "%.0f warps/SM",
                  c.launches, c.launches == 1 ? "" : "es", r.ld, r.st, 100 * r.l1_hits, c.model.bytes_per_request, c.model.loads_per_burst, r.conflicts,
                  r.unique, c.model.warps_per_sm);
    return buf;
  }
  void record(const std::string& name, const RowCounters& c, double bytes, double run_bytes, double flops) {
    const Ratios r = ratios(c, run_bytes);
    if (counters_.is_open()) {
      const auto& m = c.model;
      counters_ << name << '\t' << bytes << '\t' << flops << '\t' << m.flop_kind << '\t' << m.read_bytes << '\t'
                << m.write_bytes << '\t' << m.sectors << '\t' << m.requests << '\t' << m.wavefronts << '\t'
                << m.warps_per_sm << '\t' << m.bytes_per_request << '\t' << m.loads_per_burst << '\t' << m.l2_sectors << '\t' << m.launches
                << '\t' << m.warp_basic_blocks << '\t' << m.warp_divisions_64 << '\t'
                << m.warp_divisions_32 << '\t' << r.ld << '\t' << r.st << '\t'
                << r.conflicts << '\t' << r.unique << '\t' << c.kernels << '\n';
    }
    if (baseline_out_.is_open())
      baseline_out_ << name << '\t' << r.ld_excess << '\t' << r.st_excess << '\t' << r.conflicts << '\t' << r.unique
                    << '\n';
    if (auto it = baseline_.find(name); it != baseline_.end()) {
      // 1% above the baseline, and a hundredth absolute, is noise of neither kind: the
      // counters of a run are exact, and the baseline's decimals are rounded.
      const Ratios& b = it->second;
      auto check = [&](const char* what, double now, double was) {
        if (now > was * 1.01 + 0.01)
          regressions_.push_back(name + ": " + what + " " + std::to_string(now) + " (baseline " + std::to_string(was) + ")");
      };
      check("load sectors over the ideal", r.ld_excess, b.ld_excess);
      check("store sectors over the ideal", r.st_excess, b.st_excess);
      check("bank conflicts per shared request", r.conflicts, b.conflicts);
      check("unique bytes over ideal bytes", r.unique, b.unique);
    }
  }
  void read_baseline(const std::string& path) {
    std::ifstream in(path);
    if (!in) {
      std::fprintf(stderr, "cannot read the baseline %s\n", path.c_str());
      std::exit(2);
    }
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      const size_t tab = line.find('\t');
      Ratios r;
      if (tab != std::string::npos &&
          std::sscanf(line.c_str() + tab + 1, "%lf %lf %lf %lf", &r.ld_excess, &r.st_excess, &r.conflicts, &r.unique) == 4)
        baseline_[line.substr(0, tab)] = r;
    }
  }
  ember::bench::ModelParams model_;
  std::ofstream counters_, baseline_out_;
  std::map<std::string, Ratios> baseline_;
  std::vector<std::string> regressions_;
#endif
  Options o_;
  double copy_gbs_ = 0;  // the copy row's rate
};
}  // namespace ember::bench
