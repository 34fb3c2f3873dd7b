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
// only mode there): each kernel once at the operands of --mib, with the emulator's profile
// counters (kernels/emu/profile.h), a launch of more than --sample-blocks blocks running
// that many of them, spread over the grid, its counts scaled to the grid (Note [Sampled
// blocks] in kernels/emu/profile.cpp: a grid the SM count caps runs each block's whole
// loop, as on the GPU); the table gives the H200 time the calibrated model predicts
// (bench/kernel_model.h, bench/calibration/), its share of the copy ceiling, the target,
// and the counters behind it. GEMMs run at a side of 128 (bf16: 256), scaled by the work.
// --baseline FILE compares each row's counters with FILE and fails on a worse one;
// --write-baseline FILE writes them; --counters FILE writes every row's counters (TSV).
#include "bench/cuda_kernels_table.h"  // first: on the emulator, its qualifiers before any toolkit header

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
#include "base/error.h"
#include "kernels/emu/division_sites.h"
#endif

#include <cerrno>

using namespace ember::bench;

namespace {

#if defined(EMBER_CUDA_EMULATED)
// An integer flag's value: the whole text, in [lo, hi], or the run stops with one line
// naming the flag and its range.
long integer_flag(const std::string& flag, const std::string& text, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
    std::fprintf(stderr, "%s: '%s' is not an integer in [%ld, %ld]\n", flag.c_str(), text.c_str(), lo, hi);
    std::exit(2);
  }
  return v;
}
#endif

using namespace ember::kernels::cuda;

void elementwise_cases(Table& t, Arena& arena) {
  const int64_t n = floats(t.options().mib);  // floats per operand
  const double N = double(n);
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
  const int64_t n = floats(t.options().mib);
  const double N = double(n);
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
  const int64_t n = floats(t.options().mib);
  const double N = double(n);
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
  const int64_t n = floats(t.options().mib);
  const double N = double(n);
  float* a = arena.get<float>(n);
  float* b = arena.get<float>(n);
  const int64_t cols = 4096, rows = n / cols;
  t.bandwidth("transpose f32 [rows, 4096]", 8.0 * N, 85, [&] { transpose_batched(a, b, 1, rows, cols, cudaStream_t{}); });
  // NCHW -> NHWC of [n/(64*56*56), 64, 56, 56].
  const int64_t batch = n / (64 * 56 * 56);
  const Layout nhwc = make_layout({batch, 56, 56, 64}, {64 * 56 * 56, 56, 1, 56 * 56});
  t.bandwidth("permute f32 NCHW -> NHWC", 8.0 * batch * 64 * 56 * 56, 85,
              [&] { permute_contiguous(a, b, nhwc, cudaStream_t{}); });
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
  const int64_t total = floats(t.options().mib), count = 200;
  const double N = double(total);
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
  // The block shape gemm_bf16 takes at 8192^3 (2048 large tiles), also at the emulated side;
  // kernels of before the two shapes (scripts/kernel-counters-at.sh) had one.
  t.compute("bf16 mma.sync GEMM 8192^3, f32 out", 2.0 * big * big * big, ">= 450 TFLOP/s", [&] {
#if defined(EMBER_GEMM_BF16_TILE_SHAPES)
    gemm_bf16_with<Bf16Large>(p, cudaStream_t{});
#else
    gemm_bf16(p, cudaStream_t{});
#endif
  }, 0, double(big) / rbig, 1);
#if !defined(EMBER_CUDA_EMULATED)
  cublasDestroy(handle);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
#if defined(EMBER_CUDA_EMULATED)
  o.emulated = true;
  const char* usage =
      "usage: %s --emulated [--mib 256] [--sample-blocks 66] [--filter TEXT] [--model FILE] [--counters FILE]\n"
      "       [--baseline FILE] [--write-baseline FILE] [--peak-gbs 4800]\n"
      "  --sample-blocks N in [2, 1048576]: blocks a profiled launch of a larger grid runs\n";
#else
  const char* usage = "usage: %s [--peak-gbs 4800] [--mib 256] [--reps 20] [--filter TEXT]\n";
#endif
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
    } else if (arg == "--sample-blocks") {
      o.sample_blocks = integer_flag(arg, value(), 2, 1 << 20);
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
  if (o.peak_gbs <= 0 || o.mib == 0 || o.reps <= 0) {
    std::fprintf(stderr, "--peak-gbs, --mib and --reps must be positive\n");
    return 2;
  }
#if defined(EMBER_CUDA_EMULATED)
  // Launch configurations as on an H200: grid-stride kernels size their grids by the SMs.
  ember::emu::device_properties().sm_count = ember::bench::kH200Sms;
  if (!ember::bench::load_model(o.model).loaded) {
    std::fprintf(stderr, "cannot read the model %s (scripts/kernel-model.py writes it)\n", o.model.c_str());
    return 2;
  }
  // The divides of the kernels' index arithmetic (Note [Divisions]), found in this program.
  std::string no_sites;
  const std::vector<ember::emu::DivisionSite> sites = ember::emu::division_sites_of_this_program(no_sites);
  try {
    ember::emu::set_profile_division_sites(sites);
  } catch (const ember::Error& e) {  // more sites than the table holds: run on without them
    no_sites = e.what();
  }
  if (!no_sites.empty()) std::fprintf(stderr, "divisions not counted (the model sees none): %s\n", no_sites.c_str());
  std::printf("\nPredicted for an H200 (%d SMs) by the model fitted on %s, from the CUDA emulator's counters at "
              "operands of %zu MiB (%ld blocks of a larger grid run, its counts scaled to the grid; GEMMs at a side "
              "of 128, bf16 256, scaled by the work); predicted, not measured\n\n",
              ember::bench::kH200Sms, ember::bench::load_model(o.model).source.c_str(), o.mib, o.sample_blocks);
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
  // Each group's operands freed before the next's: at --mib 256 they are 1.3 GiB at most
  // (the optimizers'), 4.3 GiB together, above the emulated device's 4 GiB.
  for (auto cases : {elementwise_cases, reduction_cases, row_cases, data_movement_cases, optimizer_cases, gemm_cases}) {
    Arena arena;
    cases(table, arena);
  }
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
