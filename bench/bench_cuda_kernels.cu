// The hand-written CUDA kernels against the hardware's ceiling, as one Markdown table.
//
//   ember_bench_cuda_kernels [--peak-gbs 4800] [--mib 256] [--reps 20] [--filter TEXT]
//
// Each kernel runs on operands of --mib MiB (large enough that no cache holds them),
// 3 warm-up launches then --reps timed ones (cudaEvent pairs); the table gives the median,
// the bytes the kernel must move at the least (or the FLOPs it must do), the achieved
// rate, its share of the ceiling (the datasheet's 4.8 TB/s on an H200; a device-to-device
// cudaMemcpy is printed beside it as the practical one) and the issue's target.
// SGEMM is compared with cuBLAS's in the same run.
#include <cuda_runtime.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/random.cuh"

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
  size_t mib = 256;
  int reps = 20;
  std::string filter;
};

// Device buffers that live for the whole run.
class Arena {
 public:
  ~Arena() {
    for (void* p : blocks_) cudaFree(p);
  }
  template <class T>
  T* get(size_t n) {
    void* p = nullptr;
    CUDA_OK(cudaMalloc(&p, std::max<size_t>(n * sizeof(T), 1)));
    CUDA_OK(cudaMemset(p, 0, n * sizeof(T)));
    blocks_.push_back(p);
    return static_cast<T*>(p);
  }

 private:
  std::vector<void*> blocks_;
};

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

class Table {
 public:
  explicit Table(const Options& o) : o_(o) {
    std::printf("| kernel | moved | median | rate | of ceiling | target |\n|---|---|---|---|---|---|\n");
  }
  // A memory-bound kernel that must move `bytes`.
  void bandwidth(const std::string& name, double bytes, double target_pct, const std::function<void()>& run) {
    if (!selected(name)) return;
    const double ms = median_ms(run, o_.reps), gbs = bytes / ms / 1e6;
    std::printf("| %s | %.0f MB | %.1f us | %.0f GB/s | %.1f%% | %s |\n", name.c_str(), bytes / 1e6, ms * 1e3, gbs,
                100 * gbs / o_.peak_gbs, target_pct > 0 ? (std::to_string(int(target_pct)) + "%").c_str() : "-");
    std::fflush(stdout);
  }
  // A compute-bound kernel that must do `flops`; `reference_ms` > 0 adds its ratio.
  double compute(const std::string& name, double flops, const std::string& target, const std::function<void()>& run,
                 double reference_ms = 0) {
    if (!selected(name)) return 0;
    const double ms = median_ms(run, o_.reps), tflops = flops / ms / 1e9;
    std::string ratio = reference_ms > 0 ? std::to_string(int(100 * reference_ms / ms + 0.5)) + "% of cuBLAS" : "";
    std::printf("| %s | %.1f GFLOP | %.1f us | %.1f TFLOP/s | %s | %s |\n", name.c_str(), flops / 1e9, ms * 1e3, tflops,
                ratio.c_str(), target.c_str());
    std::fflush(stdout);
    return ms;
  }
  bool selected(const std::string& name) const { return o_.filter.empty() || name.find(o_.filter) != std::string::npos; }
  const Options& options() const { return o_; }

 private:
  Options o_;
};

void elementwise_cases(Table& t, Arena& arena) {
  const int64_t n = int64_t(t.options().mib) << 20 >> 2;  // floats per operand
  float* a = arena.get<float>(n);
  float* b = arena.get<float>(n);
  float* c = arena.get<float>(n);
  __nv_bfloat16* h = arena.get<__nv_bfloat16>(n);
  uint8_t* mask = arena.get<uint8_t>(n);
  const Layout flat = contiguous_layout(n);

  t.bandwidth("cudaMemcpy device to device (the practical ceiling)", 8.0 * n, 0,
              [&] { CUDA_OK(cudaMemcpyAsync(c, a, n * sizeof(float), cudaMemcpyDeviceToDevice)); });
  t.bandwidth("add f32", 12.0 * n, 90, [&] { binary<ember::kernels::ops::Add, float>(a, flat, b, flat, c, flat); });
  t.bandwidth("relu f32", 8.0 * n, 90, [&] { unary<ember::kernels::ops::Relu>(a, flat, c, flat); });
  t.bandwidth("gelu f32", 8.0 * n, 90, [&] { unary<ember::kernels::ops::Gelu>(a, flat, c, flat); });
  t.bandwidth("cast f32 -> bf16", 6.0 * n, 90, [&] { cast<__nv_bfloat16, float>(a, flat, h, flat); });
  t.bandwidth("cast bf16 -> f32", 6.0 * n, 90, [&] { cast<float, __nv_bfloat16>(h, flat, c, flat); });
  t.bandwidth("fill f32", 4.0 * n, 90, [&] { fill(c, flat, 1.0f); });
  // [rows, 1] + [1, cols]: the strided kernel, reading almost nothing.
  const int64_t cols = 4096, rows = n / cols;
  t.bandwidth("add f32, [rows,1] + [1,4096] broadcast", 4.0 * n, 0, [&] {
    binary<ember::kernels::ops::Add, float>(a, make_layout({rows, cols}, {1, 0}), b, make_layout({rows, cols}, {0, 1}),
                                            c, make_layout({rows, cols}, {cols, 1}));
  });
  t.bandwidth("copy f32, transposed [4096, rows] view", 8.0 * n, 0, [&] {
    cast<float, float>(a, make_layout({cols, rows}, {1, cols}), c, make_layout({cols, rows}, {rows, 1}));
  });
  t.bandwidth("uniform f32 (Philox)", 4.0 * n, 90, [&] { uniform(c, n, 1, 0, 0.0, 1.0); });
  t.bandwidth("dropout f32 with mask", 9.0 * n, 90, [&] { dropout(a, c, mask, n, 0.1, 1, 0); });
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
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
      std::printf("usage: %s [--peak-gbs 4800] [--mib 256] [--reps 20] [--filter TEXT]\n", argv[0]);
      return 0;
    } else if (arg == "--peak-gbs") {
      o.peak_gbs = std::atof(value().c_str());
    } else if (arg == "--mib") {
      o.mib = size_t(std::atol(value().c_str()));
    } else if (arg == "--reps") {
      o.reps = std::atoi(value().c_str());
    } else if (arg == "--filter") {
      o.filter = value();
    } else {
      std::fprintf(stderr, "unknown argument %s (see --help)\n", arg.c_str());
      return 2;
    }
  }
  if (o.peak_gbs <= 0 || o.mib == 0 || o.reps <= 0) {
    std::fprintf(stderr, "--peak-gbs, --mib and --reps must be positive\n");
    return 2;
  }
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
  Arena arena;
  elementwise_cases(table, arena);
  return 0;
}
