// The hand-written CUDA kernels against the hardware's ceiling, as one Markdown table.
//
//   ember_bench_cuda_kernels [--peak-gbs 4800] [--mib 256] [--reps 20] [--filter TEXT]
//
// Each kernel runs on operands of --mib MiB (large enough that no cache holds them),
// 3 warm-up launches then --reps timed ones (cudaEvent pairs); the table gives the median,
// the bytes the kernel must move at the least (or the FLOPs it must do), the achieved
// rate, its share of the ceiling (the datasheet's 4.8 TB/s on an H200), its share of the
// practical ceiling (a device-to-device cudaMemcpy, the first row, always run) and the
// share of that copy the kernel aims at (issue 32's targets).
// SGEMM is compared with cuBLAS's in the same run.
//
// Built with -DEMBER_CUDA=EMULATED, it runs on the CUDA emulator instead (--emulated, the
// only mode there): each kernel once at reduced operands (--mib, default 4), with the
// emulator's profile counters (kernels/emu/profile.h), and the table gives the H200 time
// the calibrated model predicts (bench/kernel_model.h, bench/calibration/) for the full
// operands, its share of the copy ceiling, the target, and the counters behind it.
// --baseline FILE compares each row's counters with FILE and fails on a worse one;
// --write-baseline FILE writes them; --counters FILE writes every row's counters (TSV).
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

#include "kernels/cuda/bucket.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/gemm_bf16.cuh"
#include "kernels/cuda/layout.cuh"
#include "kernels/cuda/norm.cuh"
#include "kernels/cuda/optim.cuh"
#include "kernels/cuda/pool.cuh"
#include "kernels/cuda/random.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/sgemm.cuh"
#include "kernels/cuda/softmax.cuh"
#if defined(EMBER_CUDA_EMULATED)
#include "bench/kernel_model.h"
#include "kernels/emu/profile.h"
#endif

namespace {

using namespace ember::kernels::cuda;

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
  size_t mib = 256;       // operands the rows are named and sized by
  size_t run_mib = 256;   // operands the kernels run on (--emulated: reduced)
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
      uniform(static_cast<T*>(p), int64_t(n), 2026 + blocks_.size(), 0, 0.0, 1.0);
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

int64_t floats(size_t mib) { return int64_t(mib) << 20 >> 2; }

#if !defined(EMBER_CUDA_EMULATED)
double median_ms(const std::function<void()>& run, int reps) {
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
    s.global_load_requests += l.global_load_requests, s.global_load_sectors += l.global_load_sectors;
    s.global_load_bytes += l.global_load_bytes;
    s.global_store_requests += l.global_store_requests, s.global_store_sectors += l.global_store_sectors;
    s.global_store_bytes += l.global_store_bytes;
    s.global_atomic_requests += l.global_atomic_requests, s.global_atomic_sectors += l.global_atomic_sectors;
    s.unique_read_bytes += l.unique_read_bytes, s.unique_write_bytes += l.unique_write_bytes;
    s.shared_load_requests += l.shared_load_requests, s.shared_store_requests += l.shared_store_requests;
    s.shared_wavefronts += l.shared_wavefronts, s.shared_ideal_wavefronts += l.shared_ideal_wavefronts;
    s.global_load_accesses += l.global_load_accesses, s.global_load_bursts += l.global_load_bursts;
    // Resident warps of an SM: occupancy's, or fewer when the grid at the full operands
    // (its blocks scaled as the operands) cannot fill the 132 SMs.
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
                   "\twarps_per_sm\tbytes_per_request\tloads_per_burst\tld_sectors_per_request\tst_sectors_per_request"
                   "\tbank_conflicts_per_request\tunique_over_ideal\tkernels\n";
    }
    if (!o.baseline.empty()) read_baseline(o.baseline);
    if (!o.write_baseline.empty()) {
      baseline_out_.open(o.write_baseline);
      baseline_out_ << "# The emulator's counters of each ember_bench_cuda_kernels row, at --mib " << o.run_mib
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
  // divide by.
  // --emulated runs it on operands of `run_bytes` (default: `bytes` scaled by --mib).
  void bandwidth(const std::string& name, double bytes, double target_pct, const std::function<void()>& run,
                 double run_bytes = 0) {
    if (!selected(name)) return;
#if defined(EMBER_CUDA_EMULATED)
    const double scale = run_bytes > 0 ? bytes / run_bytes : double(o_.mib) / double(o_.run_mib);
    if (name.rfind("cudaMemcpy", 0) == 0) {  // no kernel: the measured copy is the ceiling
      copy_gbs_ = model_.copy_gbs;
      std::printf("| %s | %.0f MB | %.1f us (measured) | %.0f GB/s | %.1f%% | 100.0%% | - | - | - |\n", name.c_str(),
                  bytes / 1e6, bytes / copy_gbs_ / 1e3, copy_gbs_, 100 * copy_gbs_ / o_.peak_gbs);
      return;
    }
    const RowCounters c = profile(run, scale, scale, 0, 0);
    const ember::bench::Prediction p = ember::bench::predict(c.model, model_);
    const double gbs = bytes / p.us / 1e3;
    std::printf("| %s | %.0f MB | %.1f us | %.0f GB/s | %.1f%% | %.1f%% | %s | %s | %s |\n", name.c_str(), bytes / 1e6,
                p.us, gbs, 100 * gbs / o_.peak_gbs, 100 * gbs / copy_gbs_,
                target_pct > 0 ? (std::to_string(int(target_pct)) + "%").c_str() : "-", p.bound,
                describe(c, bytes / scale).c_str());
    record(name, c, bytes, bytes / scale, 0);
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
    run();
    CUDA_OK(cudaDeviceSynchronize());
    auto launches = ember::emu::take_profiles();
    ember::emu::set_profile("", false);
    return gather(launches, work_scale, unique_scale, flops, flop_kind);
  }
  // The counters a change that uncoalesces or conflicts makes worse, shape-independent.
  // Sectors per request are printed; the baseline holds sectors over the ideal for the
  // bytes the lanes asked for (1 when coalesced), which a change of access width (4 to 16
  // bytes a lane: 4 to 16 sectors a request) leaves alone, and uncoalescing raises.
  struct Ratios {
    double ld = 0, st = 0, conflicts = 0, unique = 0, ld_excess = 0, st_excess = 0;
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
            over_ideal(s.global_store_sectors, s.global_store_bytes)};
  }
  static std::string describe(const RowCounters& c, double run_bytes) {
    const Ratios r = ratios(c, run_bytes);
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "%d launch%s; ld %.1f, st %.1f sect/req, %.0f B/req, %.1f loads/burst; bank conflicts %.2f/req; unique/ideal %.2f; "
                  "%.0f warps/SM",
                  c.launches, c.launches == 1 ? "" : "es", r.ld, r.st, c.model.bytes_per_request, c.model.loads_per_burst, r.conflicts,
                  r.unique, c.model.warps_per_sm);
    return buf;
  }
  void record(const std::string& name, const RowCounters& c, double bytes, double run_bytes, double flops) {
    const Ratios r = ratios(c, run_bytes);
    if (counters_.is_open()) {
      const auto& m = c.model;
      counters_ << name << '\t' << bytes << '\t' << flops << '\t' << m.flop_kind << '\t' << m.read_bytes << '\t'
                << m.write_bytes << '\t' << m.sectors << '\t' << m.requests << '\t' << m.wavefronts << '\t'
                << m.warps_per_sm << '\t' << m.bytes_per_request << '\t' << m.loads_per_burst << '\t' << r.ld << '\t' << r.st << '\t'
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

void elementwise_cases(Table& t, Arena& arena) {
  const int64_t n = floats(t.options().run_mib);  // floats per operand
  const double N = double(floats(t.options().mib));  // as the rows are named and sized
  float* a = arena.get<float>(n);
  float* b = arena.get<float>(n);
  float* c = arena.get<float>(n);
  __nv_bfloat16* h = arena.get<__nv_bfloat16>(n);
  uint8_t* mask = arena.get<uint8_t>(n);
  const Layout flat = contiguous_layout(n);

  t.bandwidth("cudaMemcpy device to device (the practical ceiling)", 8.0 * N, 0,
              [&] { CUDA_OK(cudaMemcpyAsync(c, a, n * sizeof(float), cudaMemcpyDeviceToDevice)); });
  t.bandwidth("add f32", 12.0 * N, 90, [&] { binary<ember::kernels::ops::Add, float>(a, flat, b, flat, c, flat); });
  t.bandwidth("relu f32", 8.0 * N, 90, [&] { unary<ember::kernels::ops::Relu>(a, flat, c, flat); });
  t.bandwidth("gelu f32", 8.0 * N, 90, [&] { unary<ember::kernels::ops::Gelu>(a, flat, c, flat); });
  t.bandwidth("cast f32 -> bf16", 6.0 * N, 90, [&] { cast<__nv_bfloat16, float>(a, flat, h, flat); });
  t.bandwidth("cast bf16 -> f32", 6.0 * N, 90, [&] { cast<float, __nv_bfloat16>(h, flat, c, flat); });
  t.bandwidth("fill f32", 4.0 * N, 90, [&] { fill(c, flat, 1.0f); });
  // [rows, 1] + [1, cols]: the strided kernel, reading almost nothing.
  const int64_t cols = 4096, rows = n / cols;
  t.bandwidth("add f32, [rows,1] + [1,4096] broadcast", 4.0 * N, 0, [&] {
    binary<ember::kernels::ops::Add, float>(a, make_layout({rows, cols}, {1, 0}), b, make_layout({rows, cols}, {0, 1}),
                                            c, make_layout({rows, cols}, {cols, 1}));
  });
  t.bandwidth("copy f32, transposed [4096, rows] view", 8.0 * N, 85, [&] {
    cast<float, float>(a, make_layout({cols, rows}, {1, cols}), c, make_layout({cols, rows}, {rows, 1}));
  });
  t.bandwidth("uniform f32 (Philox)", 4.0 * N, 80, [&] { uniform(c, n, 1, 0, 0.0, 1.0); });
  t.bandwidth("dropout f32 with mask", 9.0 * N, 75, [&] { dropout(a, c, mask, n, 0.1, 1, 0); });
}

void reduction_cases(Table& t, Arena& arena) {
  const int64_t n = floats(t.options().run_mib);
  const double N = double(floats(t.options().mib));
  float* x = arena.get<float>(n);
  float* out = arena.get<float>(n / 1024 + 1);
  int64_t* idx = arena.get<int64_t>(n / 1024 + 1);
  const size_t ws_bytes = std::max({reduce_all_workspace<SumReduce<float>>(n),
                                    reduce_last_dim_workspace<VarReduce<float>>(n / 1024, 1024),
                                    reduce_middle_dim_workspace<SumReduce<float>>(n / (1024 * 256), 1024, 256)});
  void* ws = arena.get<unsigned char>(ws_bytes);
  t.bandwidth("sum f32, all elements", 4.0 * N, 90,
              [&] { reduce_all(SumReduce<float>{}, x, out, n, ws, ws_bytes, cudaStream_t{}); });
  t.bandwidth("sum f32, last dim of [n/1024, 1024]", 4.0 * N, 90,
              [&] { reduce_last_dim(SumReduce<float>{}, x, out, n / 1024, 1024, ws, ws_bytes, cudaStream_t{}); });
  t.bandwidth("sum f32, middle dim of [n/262144, 1024, 256]", 4.0 * N, 90, [&] {
    reduce_middle_dim(SumReduce<float>{}, x, out, n / (1024 * 256), 1024, 256, ws, ws_bytes, cudaStream_t{});
  });
  t.bandwidth("var f32, last dim of [n/1024, 1024]", 4.0 * N, 90, [&] {
    reduce_last_dim(VarReduce<float>{1}, x, out, n / 1024, 1024, ws, ws_bytes, cudaStream_t{});
  });
  t.bandwidth("argmax f32, last dim of [n/1024, 1024]", 4.0 * N, 90, [&] {
    reduce_last_dim(ArgMaxReduce<float>{}, x, IndexedOut<float>{out, idx}, n / 1024, 1024, ws, ws_bytes,
                    cudaStream_t{});
  });
}

void row_cases(Table& t, Arena& arena) {
  const int64_t n = floats(t.options().run_mib);
  const double N = double(floats(t.options().mib));
  float* x = arena.get<float>(n);
  float* y = arena.get<float>(n);
  float* dy = arena.get<float>(n);
  float* dx = arena.get<float>(n);
  for (int64_t cols : {int64_t(1024), int64_t(32768)}) {
    const int64_t rows = n / cols;
    const std::string shape = " [" + std::to_string(int64_t(N) / cols) + ", " + std::to_string(cols) + "]";
    t.bandwidth("softmax f32" + shape, 8.0 * N, 90, [&] { softmax(x, y, rows, cols, cudaStream_t{}); });
    t.bandwidth("log_softmax f32" + shape, 8.0 * N, 90, [&] { log_softmax(x, y, rows, cols, cudaStream_t{}); });
    t.bandwidth("softmax backward f32" + shape, 12.0 * N, 90,
                [&] { softmax_backward(y, dy, dx, rows, cols, cudaStream_t{}); });
  }
  const int64_t cols = 4096, rows = n / cols;
  float* gamma = arena.get<float>(cols);
  float* beta = arena.get<float>(cols);
  float* mean = arena.get<float>(rows);
  float* rstd = arena.get<float>(rows);
  float* dgamma = arena.get<float>(cols);
  float* dbeta = arena.get<float>(cols);
  const size_t ws_bytes = layer_norm_backward_workspace_bytes<float>(rows, cols);
  void* ws = arena.get<unsigned char>(ws_bytes);
  const std::string shape = " [" + std::to_string(int64_t(N) / cols) + ", 4096]";
  t.bandwidth("layer norm f32" + shape, 8.0 * N, 85,
              [&] { layer_norm(x, gamma, beta, y, mean, rstd, rows, cols, 1e-5, cudaStream_t{}); });
  t.bandwidth("layer norm backward f32" + shape, 12.0 * N, 75, [&] {
    layer_norm_backward(dy, x, mean, rstd, gamma, dx, dgamma, dbeta, rows, cols, ws, cudaStream_t{});
  });
}

void data_movement_cases(Table& t, Arena& arena) {
  const int64_t n = floats(t.options().run_mib);
  const double N = double(floats(t.options().mib));
  float* a = arena.get<float>(n);
  float* b = arena.get<float>(n);
  const int64_t cols = 4096, rows = n / cols;
  t.bandwidth("transpose f32 [rows, 4096]", 8.0 * N, 85, [&] { transpose_batched(a, b, 1, rows, cols, cudaStream_t{}); });
  // NCHW -> NHWC of [n/(64*56*56), 64, 56, 56].
  const int64_t batch = n / (64 * 56 * 56);
  const Layout nhwc = make_layout({batch, 56, 56, 64}, {64 * 56 * 56, 56, 1, 56 * 56});
  t.bandwidth("permute f32 NCHW -> NHWC", 8.0 * int64_t(N / (64 * 56 * 56)) * 64 * 56 * 56, 85,
              [&] { permute_contiguous(a, b, nhwc, cudaStream_t{}); }, 8.0 * batch * 64 * 56 * 56);
  // The CNN's 2x2 max pool at a large batch: reads x, writes y and 1-byte codes.
  const int64_t planes = n / (56 * 56);
  const PoolGeometry g = pool_geometry(planes, 1, 56, 56, 2, 2, 2, 2, 0, 0, 1, 1, false);
  uint8_t* codes = arena.get<uint8_t>(n / 4);
  t.bandwidth("max pool 2x2 f32 forward, with codes", 4.0 * N + 5.0 * N / 4, 75,
              [&] { max_pool2d_forward(a, b, static_cast<int64_t*>(nullptr), codes, g, false, cudaStream_t{}); });
  t.bandwidth("max pool 2x2 f32 backward, from codes", 5.0 * N / 4 + 4.0 * N, 75, [&] {
    max_pool2d_backward(b, static_cast<const int64_t*>(nullptr), codes, a, g, cudaStream_t{});
  });
}

void optimizer_cases(Table& t, Arena& arena) {
  // A model's parameters: 200 tensors of awkward sizes adding up to --mib of float32.
  const int64_t total = floats(t.options().run_mib), count = 200;
  const double N = double(floats(t.options().mib));
  std::vector<AdamTensor<float, float>> adam;
  std::vector<SgdTensor<float, float>> sgd;
  std::vector<BucketSlot<float>> slots;
  float* p = arena.get<float>(total);
  float* g = arena.get<float>(total);
  float* m = arena.get<float>(total);
  float* v = arena.get<float>(total);
  float* flat = arena.get<float>(total);
  int64_t offset = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t size = i + 1 < count ? total / count - 3 * (i % 7) : total - offset;
    adam.push_back({p + offset, g + offset, m + offset, v + offset, size});
    sgd.push_back({p + offset, g + offset, m + offset, size});
    slots.push_back({g + offset, size, offset});
    offset += size;
  }
  ember::kernels::ops::AdamUpdate adamw{1e-3, 0.9, 0.999, 1e-8, 1e-2, true, 0.1, 0.05};
  t.bandwidth("AdamW f32, 200 tensors, one launch", 28.0 * N, 85,
              [&] { adam_update<float, float>(adam, adamw, cudaStream_t{}); });
  ember::kernels::ops::SgdUpdate momentum{0.01, 0.9, 0, 0, false, false};
  t.bandwidth("SGD momentum f32, 200 tensors", 20.0 * N, 85,
              [&] { sgd_update<float, float>(sgd, momentum, cudaStream_t{}); });
  t.bandwidth("bucket flatten f32, 200 tensors, scale 1/8", 8.0 * N, 90,
              [&] { bucket_flatten<float>(slots, flat, total, 0.125, cudaStream_t{}); });
}

void gemm_cases(Table& t, Arena& arena) {
  const int64_t s = 4096;
  const double flops = 2.0 * s * s * s;
  const int64_t big = 8192;
#if defined(EMBER_CUDA_EMULATED)
  // Emulated at a side of 128 (bf16: 256), whole tiles: requests and wavefronts scale
  // with the work (side^3), the operands with side^2. No cuBLAS here: the model file
  // holds the measured cuBLAS time the "of cuBLAS" share divides by.
  const int64_t rs = 128, rbig = 256;
  const double cublas_ms = 0;
#else
  const int64_t rs = s, rbig = big;
#endif
  float* a = arena.get<float>(rs * rs);
  float* b = arena.get<float>(rs * rs);
  float* c = arena.get<float>(rs * rs);
#if !defined(EMBER_CUDA_EMULATED)
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    std::printf("| cuBLAS | could not be initialised | | | | |\n");
    return;
  }
  const float one = 1.0f, zero = 0.0f;
  // Row-major C = A B is column-major C^T = B^T A^T.
  const double cublas_ms = t.compute("cuBLAS SGEMM 4096^3", flops, "-", [&] {
    cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, int(s), int(s), int(s), &one, b, int(s), a, int(s), &zero, c, int(s));
  });
#endif
  for (SgemmVersion v : kSgemmVersions) {
    if (v == SgemmVersion::Naive) continue;  // minutes at 4096^3; v2 shows the first step
    const std::string name = std::string("sgemm ") + sgemm_version_name(v) + " 4096^3";
    t.compute(name, flops, v == kSgemmDefault ? ">= 90% of cuBLAS" : "-",
              [&] { sgemm(v, false, false, rs, rs, rs, 1.0f, a, rs, b, rs, 0.0f, c, rs, cudaStream_t{}); }, cublas_ms,
              double(s) / rs);
  }
  __nv_bfloat16* ha = arena.get<__nv_bfloat16>(rbig * rbig);
  __nv_bfloat16* hb = arena.get<__nv_bfloat16>(rbig * rbig);
  float* hc = arena.get<float>(rbig * rbig);
  GemmProblem<__nv_bfloat16, float> p;
  p.m = p.n = p.k = rbig;
  p.a = ha, p.lda = rbig, p.b = hb, p.ldb = rbig, p.c = hc, p.ldc = rbig;
  t.compute("bf16 mma.sync GEMM 8192^3, f32 out", 2.0 * big * big * big, ">= 450 TFLOP/s",
            [&] { gemm_bf16(p, cudaStream_t{}); }, 0, double(big) / rbig, 1);
#if !defined(EMBER_CUDA_EMULATED)
  cublasDestroy(handle);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
#if defined(EMBER_CUDA_EMULATED)
  o.emulated = true;
  o.run_mib = 4;
  const char* usage =
      "usage: %s --emulated [--mib 256] [--run-mib 4] [--filter TEXT] [--model FILE] [--counters FILE]\n"
      "       [--baseline FILE] [--write-baseline FILE] [--peak-gbs 4800]\n";
#else
  const char* usage = "usage: %s [--peak-gbs 4800] [--mib 256] [--reps 20] [--filter TEXT]\n";
#endif
  bool run_mib_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::printf(usage, argv[0]);
      return 0;
    } else if (arg == "--peak-gbs") {
      o.peak_gbs = std::atof(value().c_str());
    } else if (arg == "--mib") {
      o.mib = size_t(std::atol(value().c_str()));
    } else if (arg == "--reps") {
      o.reps = std::atoi(value().c_str());
    } else if (arg == "--filter") {
      o.filter = value();
#if defined(EMBER_CUDA_EMULATED)
    } else if (arg == "--emulated") {
    } else if (arg == "--run-mib") {
      o.run_mib = size_t(std::atol(value().c_str()));
      run_mib_given = true;
    } else if (arg == "--model") {
      o.model = value();
    } else if (arg == "--counters") {
      o.counters = value();
    } else if (arg == "--baseline") {
      o.baseline = value();
    } else if (arg == "--write-baseline") {
      o.write_baseline = value();
#else
    } else if (arg == "--emulated") {
      std::fprintf(stderr, "--emulated needs a build with -DEMBER_CUDA=EMULATED (this one runs on the GPU)\n");
      return 2;
#endif
    } else {
      std::fprintf(stderr, "unknown argument %s (see --help)\n", arg.c_str());
      return 2;
    }
  }
  if (!o.emulated || !run_mib_given) o.run_mib = o.emulated ? std::min<size_t>(o.run_mib, o.mib) : o.mib;
  if (o.peak_gbs <= 0 || o.mib == 0 || o.run_mib == 0 || o.reps <= 0) {
    std::fprintf(stderr, "--peak-gbs, --mib, --run-mib and --reps must be positive\n");
    return 2;
  }
#if defined(EMBER_CUDA_EMULATED)
  // Launch configurations as on an H200: grid-stride kernels size their grids by the SMs.
  ember::emu::device_properties().sm_count = ember::bench::kH200Sms;
  if (!ember::bench::load_model(o.model).loaded) {
    std::fprintf(stderr, "cannot read the model %s (scripts/kernel-model.py writes it)\n", o.model.c_str());
    return 2;
  }
  std::printf("\nPredicted for an H200 (%d SMs) by the model fitted on %s, from the CUDA emulator's counters at "
              "operands of %zu MiB scaled to %zu MiB (GEMMs at a side of 128, bf16 256, scaled by the work); "
              "predicted, not measured\n\n",
              ember::bench::kH200Sms, ember::bench::load_model(o.model).source.c_str(), o.run_mib, o.mib);
  Table table(o);
#else
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("ember_bench_cuda_kernels: no CUDA device; nothing to measure\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs; operands of %zu MiB, median of %d runs; ceiling %.0f GB/s\n\n", prop.name,
              prop.multiProcessorCount, o.mib, o.reps, o.peak_gbs);
  Table table(o);
#endif
  Arena arena;
  elementwise_cases(table, arena);
  reduction_cases(table, arena);
  row_cases(table, arena);
  data_movement_cases(table, arena);
  optimizer_cases(table, arena);
  gemm_cases(table, arena);
#if defined(EMBER_CUDA_EMULATED)
  if (!table.regressions().empty()) {
    std::fprintf(stderr, "\nCounters worse than the baseline %s:\n", o.baseline.c_str());
    for (const std::string& r : table.regressions()) std::fprintf(stderr, "  %s\n", r.c_str());
    std::fprintf(stderr, "(after an intended change: scripts/kernel-counters-baseline.sh BUILD)\n");
    return 1;
  }
#endif
  return 0;
}
