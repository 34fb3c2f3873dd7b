// The CUDA slots of conv2d and its backwards, NCHW with contiguous inputs (core ensures
// it): through cuDNN where the build has it (conv_cudnn.h; the default there), else, and
// by name, im2col / col2im (im2col.cuh) around the backend's GEMM (blas.h), per group a
// GEMM batched over a chunk of samples whose columns fit kMaxColumnBytes. A 1x1,
// stride-1, unpadded convolution uses the input as its columns. float32 and float64
// compute in their type. 16-bit tensors compute in float32 a chunk at a time, never
// through whole-tensor float32 copies (Note [16-bit chunks]); results are rounded once,
// when written (the CPU's rule). The im2col path is deterministic: no atomics;
// grad_weight sums the samples in order. grad_bias is one reduction (reduce.cuh) under
// both variants.
//
// Note [16-bit chunks]: im2col widens the 16-bit input into float32 columns; the float32
// GEMM writes a chunk's output (or reads a chunk's output gradient) through a float32
// staging buffer, which the bias/ReLU pass rounds into y (or a cast fills from dy);
// col2im sums float32 columns and rounds into dx. Only the weight (or the float32
// accumulator of its gradient) is converted whole: parameter-sized, and read by every
// chunk. The chunk keeps columns plus staging within kMaxStagingBytes, so the scratch
// stays below the 16-bit activations it serves: the CNN example's first convolution at
// batch 128 (bf16 y: 6.1 MiB) stages 32 samples, 3.9 MiB, where whole copies took 16.1.
#include <atomic>
#include <cstdlib>
#include <memory>

#include "kernels/cuda/blas.h"
#include "kernels/cuda/conv_cudnn.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/im2col.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/variants.h"

#include "kernels/common/unary_ops.h"
#include "kernels/cpu/variant.h"
#include "core/kernel_scratch.h"
#include "kernels/cuda/cuda_kernels.h"

namespace ember::kernels::cuda {
namespace {

constexpr int64_t kMaxColumnBytes = int64_t(64) << 20;
constexpr int64_t kMaxStagingBytes = int64_t(4) << 20;  // 16-bit passes: Note [16-bit chunks]

constexpr int kAuto = 0, kCudnn = 1, kIm2col = 2;

int parse_conv(std::string_view name) {
  if (name == "auto") return kAuto;
  if (name == "im2col") return kIm2col;
  if (name == "cudnn") {
#if !defined(EMBER_WITH_CUDNN)
    EMBER_FAIL("conv2d variant 'cudnn' is not in this build (the emulated device and builds without cuDNN have "
               "im2col only)");
#endif
    return kCudnn;
  }
  EMBER_FAIL("conv2d: unknown cuda variant '", name, "' (expected auto, cudnn or im2col)");
}

std::atomic<int> g_conv{cpu::variant_from_env("EMBER_CONV", kAuto, +[](std::string_view s) { return parse_conv(s); })};
std::atomic<bool> g_deterministic{false};
std::atomic<bool> g_benchmark{[] {
  const char* v = std::getenv("EMBER_CUDNN_BENCHMARK");
  return v != nullptr && std::string_view(v) == "1";
}()};

// A tensor's values in compute type C: the tensor itself, or a converted copy (the
// weight only: parameter-sized).
template <class C>
struct Input {
  const C* ptr = nullptr;
  std::unique_ptr<DeviceScratch> copy;
  Input(const Tensor& t, cudaStream_t stream) {
    if (!t.defined()) return;
    if (t.dtype() == DType::Float32 || t.dtype() == DType::Float64) {
      ptr = static_cast<const C*>(t.data_ptr());
      return;
    }
    copy = std::make_unique<DeviceScratch>(t.device().index, stream, t.numel() * sizeof(C));
    const Layout l = layout_of(t);
    visit_cuda_dtype(t.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (is_16bit_float_v<T>) cast<C, T>(static_cast<const T*>(t.data_ptr()), l, copy->get<C>(), l, stream);
    });
    ptr = copy->get<C>();
  }
};

// Where a result in compute type C goes: the tensor itself, or scratch rounded into it
// by finish().
template <class C>
struct Output {
  const Tensor& t;
  C* ptr = nullptr;
  std::unique_ptr<DeviceScratch> scratch;
  Output(const Tensor& out, cudaStream_t stream) : t(out) {
    if (!t.defined()) return;
    if (t.dtype() == DType::Float32 || t.dtype() == DType::Float64) {
      ptr = static_cast<C*>(t.data_ptr());
      return;
    }
    scratch = std::make_unique<DeviceScratch>(t.device().index, stream, t.numel() * sizeof(C));
    ptr = scratch->get<C>();
  }
  void finish(cudaStream_t stream) {
    if (!scratch) return;
    const Layout l = layout_of(t);
    visit_cuda_dtype(t.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (is_16bit_float_v<T>) cast<T, C>(ptr, l, static_cast<T*>(t.data_ptr()), l, stream);
    });
  }
};

// y [N, O, P] = relu?(src + bias[o]), computed in compute_t<T> and rounded to T; src is
// y itself (in place) or, for a 16-bit y, the float32 GEMM output of the same samples.
template <class S, class T>
__global__ void __launch_bounds__(256) channel_bias_relu_kernel(const S* src, T* y, const T* bias, int64_t O, int64_t P,
                                                                int64_t total, bool relu) {
  using C = compute_t<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += step) {
    const C v = bias ? C(widen(src[i])) + widen(bias[(i / P) % O]) : C(widen(src[i]));
    y[i] = round_to<T>(relu ? ops::Relu{}(v) : v);
  }
}

// gb [O] = the sum of gy [N, O, P] over N and P in compute_t<T>, rounded once: PyTorch's
// grad_output.sum((0, 2, 3)), for both variants. Not cuDNN's BackwardBias: it has no
// bf16, and on an H200 took 119 us where reading the 12.8 MB once takes 3.
template <class T>
void conv2d_bias_grad(const Tensor& gb, const Tensor& gout, cudaStream_t s) {
  const int64_t N = gout.shape()[0], O = gout.shape()[1], P = gout.shape()[2] * gout.shape()[3];
  const SumReduce<T> r;
  const DeviceScratch ws(gb.device().index, s, reduce_outer_inner_workspace<SumReduce<T>>(N, O, P));
  reduce_outer_inner(r, static_cast<const T*>(gout.data_ptr()), static_cast<T*>(gb.data_ptr()), N, O, P, ws.get(),
                     ws.size(), s);
}

LaunchConfig elementwise_config(int64_t items) {
  return LaunchConfig{dim3(grid_stride_blocks(items, kBlockThreads)), dim3(kBlockThreads), 0};
}

// The shapes of one convolution: input [N, C, H, W], weight [O, C / G, kh, kw], output
// [N, O, OH, OW]; per group, the columns are KK = (C / G) * kh * kw rows of P = OH * OW.
// elem: the compute type's size; half: 16-bit tensors (Note [16-bit chunks]).
struct ConvShape {
  int64_t N, C, H, W, O, kh, kw, OH, OW, G, Cg, Og, KK, P;
  bool direct;    // 1x1, stride 1, no padding, not 16-bit: the input is its own columns
  int64_t chunk;  // samples per im2col pass

  ConvShape(const Shape& in, const Shape& weight, const Shape& out, const Conv2dParams& p, int64_t elem, bool half) {
    N = in[0], C = in[1], H = in[2], W = in[3];
    O = weight[0], kh = weight[2], kw = weight[3];
    OH = out[2], OW = out[3], G = p.groups;
    Cg = C / G, Og = O / G, KK = Cg * kh * kw, P = OH * OW;
    direct = !half && kh == 1 && kw == 1 && p.stride[0] == 1 && p.stride[1] == 1 && p.padding[0] == 0 &&
             p.padding[1] == 0;
    const int64_t columns = C * kh * kw * P * elem;  // bytes per sample
    const int64_t per_sample = std::max<int64_t>(half ? columns + O * P * elem : columns, 1);
    chunk = std::max<int64_t>(1, std::min<int64_t>(N, (half ? kMaxStagingBytes : kMaxColumnBytes) / per_sample));
  }
  Im2colGeometry geometry(int64_t n, const Conv2dParams& p) const {
    return im2col_geometry(n, C, H, W, kh, kw, p.stride[0], p.stride[1], p.padding[0], p.padding[1], p.dilation[0],
                           p.dilation[1]);
  }
};

// A tensor's elements as T; null for an undefined tensor (no bias, no bias gradient).
template <class T>
const T* data_of(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}
template <class T>
T* mutable_data_of(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// The count elements of t from offset, in compute type: t itself, or for a 16-bit t their
// float32 copy in stage.
template <class T>
const compute_t<T>* staged(const T* t, int64_t offset, int64_t count, const DeviceScratch* stage, cudaStream_t s) {
  if constexpr (is_16bit_float_v<T>) {
    const Layout l = contiguous_layout(count);
    cast<float, T>(t + offset, l, stage->get<float>(), l, s);
    return stage->get<float>();
  } else {
    return t + offset;
  }
}

// The scratch of a pass (Note [16-bit chunks]): the columns of one chunk, and for 16-bit
// tensors the chunk's float32 output or output gradient. cuda_conv2d_scratch models it.
struct ChunkScratch {
  std::unique_ptr<DeviceScratch> col, stage;
  ChunkScratch(const ConvShape& cs, bool half, int64_t elem, int dev, cudaStream_t s) {
    if (!cs.direct) col = std::make_unique<DeviceScratch>(dev, s, cs.chunk * cs.G * cs.KK * cs.P * elem);
    if (half) stage = std::make_unique<DeviceScratch>(dev, s, cs.chunk * cs.O * cs.P * elem);
  }
};

template <class T>
void conv2d_typed(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor& bias,
                  const Conv2dParams& p) {
  using C = compute_t<T>;
  constexpr bool kHalf = is_16bit_float_v<T>;
  const OpScope scope(out);
  const cudaStream_t s = scope.stream();
  const int dev = out.device().index;
  const ConvShape cs(in.shape(), weight.shape(), out.shape(), p, sizeof(C), kHalf);
  const T *x = data_of<T>(in), *b = data_of<T>(bias);
  T* y = mutable_data_of<T>(out);
  const Input<C> w(weight, s);
  const ChunkScratch scratch(cs, kHalf, sizeof(C), dev, s);
  for (int64_t n0 = 0; n0 < cs.N; n0 += cs.chunk) {
    const int64_t nb = std::min(cs.chunk, cs.N - n0);
    const T* x_n = x + n0 * cs.C * cs.H * cs.W;
    T* y_n = y + n0 * cs.O * cs.P;
    const C* cols = nullptr;
    C* y_c;  // the GEMM's output: y itself, or the 16-bit chunk's float32 staging
    if constexpr (kHalf) {
      y_c = scratch.stage->get<C>();
    } else {
      y_c = y_n;
      if (cs.direct) cols = x_n;
    }
    if (!cs.direct) {
      im2col(x_n, scratch.col->get<C>(), cs.geometry(nb, p), s);
      cols = scratch.col->get<C>();
    }
    for (int64_t g = 0; g < cs.G; ++g) {  // y[n, g] [Og, P] = W_g [Og, KK] @ col[n, g] [KK, P]
      GemmProblem<C, C> q;
      q.m = cs.Og, q.n = cs.P, q.k = cs.KK, q.batch = nb;
      q.a = w.ptr + g * cs.Og * cs.KK, q.lda = cs.KK, q.stride_a = 0;
      q.b = cols + g * cs.KK * cs.P, q.ldb = cs.P, q.stride_b = cs.G * cs.KK * cs.P;
      q.c = y_c + g * cs.Og * cs.P, q.ldc = cs.P, q.stride_c = cs.O * cs.P;
      gemm<C>(q, nullptr, false, dev, s);
    }
    if (kHalf || b || p.relu) {
      const int64_t total = nb * cs.O * cs.P;
      launch<channel_bias_relu_kernel<C, T>>(elementwise_config(total), s, y_c, y_n, b, cs.O, cs.P, total, p.relu);
    }
  }
}

// grad_x[n, g] = col2im(W_g^T [KK, Og] @ grad_y[n, g] [Og, P]).
template <class T>
void conv2d_backward_input_typed(const Tensor& gin, const Tensor& gout, const Tensor& weight, const Conv2dParams& p) {
  using C = compute_t<T>;
  constexpr bool kHalf = is_16bit_float_v<T>;
  const OpScope scope(gin);
  const cudaStream_t s = scope.stream();
  const int dev = gin.device().index;
  const ConvShape cs(gin.shape(), weight.shape(), gout.shape(), p, sizeof(C), kHalf);
  const T* gy = data_of<T>(gout);
  T* gx = mutable_data_of<T>(gin);
  const Input<C> w(weight, s);
  const ChunkScratch scratch(cs, kHalf, sizeof(C), dev, s);
  for (int64_t n0 = 0; n0 < cs.N; n0 += cs.chunk) {
    const int64_t nb = std::min(cs.chunk, cs.N - n0);
    T* gx_n = gx + n0 * cs.C * cs.H * cs.W;
    C* cols;
    if constexpr (kHalf) cols = scratch.col->get<C>();
    else cols = cs.direct ? gx_n : scratch.col->get<C>();
    const C* gy_c = staged(gy, n0 * cs.O * cs.P, nb * cs.O * cs.P, scratch.stage.get(), s);
    for (int64_t g = 0; g < cs.G; ++g) {
      GemmProblem<C, C> q;
      q.m = cs.KK, q.n = cs.P, q.k = cs.Og, q.batch = nb;
      q.a = w.ptr + g * cs.Og * cs.KK, q.lda = cs.KK, q.trans_a = true, q.stride_a = 0;
      q.b = gy_c + g * cs.Og * cs.P, q.ldb = cs.P, q.stride_b = cs.O * cs.P;
      q.c = cols + g * cs.KK * cs.P, q.ldc = cs.P, q.stride_c = cs.G * cs.KK * cs.P;
      gemm<C>(q, nullptr, false, dev, s);
    }
    if (!cs.direct) col2im(cols, gx_n, cs.geometry(nb, p), s);
  }
}

// grad_w_g [Og, KK] = the sum over samples of grad_y[n, g] [Og, P] @ col[n, g]^T [P, KK].
template <class T>
void conv2d_backward_weight_typed(const Tensor& gw, const Tensor& gout, const Tensor& in, const Conv2dParams& p) {
  using C = compute_t<T>;
  constexpr bool kHalf = is_16bit_float_v<T>;
  const OpScope scope(gw);
  const cudaStream_t s = scope.stream();
  const int dev = gw.device().index;
  const ConvShape cs(in.shape(), gw.shape(), gout.shape(), p, sizeof(C), kHalf);
  const T *x = data_of<T>(in), *gy = data_of<T>(gout);
  Output<C> w(gw, s);  // a 16-bit gradient sums all chunks in float32, rounded once
  const ChunkScratch scratch(cs, kHalf, sizeof(C), dev, s);
  for (int64_t n0 = 0; n0 < cs.N; n0 += cs.chunk) {
    const int64_t nb = std::min(cs.chunk, cs.N - n0);
    const T* x_n = x + n0 * cs.C * cs.H * cs.W;
    const C* cols = nullptr;
    if constexpr (!kHalf) {
      if (cs.direct) cols = x_n;
    }
    if (!cs.direct) {
      im2col(x_n, scratch.col->get<C>(), cs.geometry(nb, p), s);
      cols = scratch.col->get<C>();
    }
    const C* gy_c = staged(gy, n0 * cs.O * cs.P, nb * cs.O * cs.P, scratch.stage.get(), s);
    for (int64_t i = 0; i < nb; ++i)
      for (int64_t g = 0; g < cs.G; ++g) {
        GemmProblem<C, C> q;
        q.m = cs.Og, q.n = cs.KK, q.k = cs.P, q.beta = n0 + i == 0 ? 0.0f : 1.0f;
        q.a = gy_c + (i * cs.O + g * cs.Og) * cs.P, q.lda = cs.P;
        q.b = cols + (i * cs.G + g) * cs.KK * cs.P, q.ldb = cs.P, q.trans_b = true;
        q.c = w.ptr + g * cs.Og * cs.KK, q.ldc = cs.KK;
        gemm<C>(q, nullptr, false, dev, s);
      }
  }
  if (cs.N == 0) fill<C>(w.ptr, layout_of(gw), C(0), s);  // no samples: no GEMM wrote it
  w.finish(s);
}

// Calls f(T{}) with the tensors' element type: float64, float32, bf16 or f16.
template <class F>
void by_float_dtype(DType dtype, const char* op, const F& f) {
  switch (dtype) {
    case DType::Float64: return f(double{});
    case DType::Float32: return f(float{});
    case DType::BFloat16: return f(__nv_bfloat16{});
    case DType::Float16: return f(__half{});
    default: EMBER_FAIL(op, " kernel: dtype ", dtype_name(dtype), " is not supported on cuda");
  }
}

void conv2d_kernel(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor& bias,
                   const Conv2dParams& p) {
  if (out.numel() == 0) return;
#if defined(EMBER_WITH_CUDNN)
  if (g_conv.load() != kIm2col) {
    cudnn_conv2d(out, in, weight, p);
    if (!bias.defined() && !p.relu) return;
    const OpScope scope(out);
    const int64_t O = out.shape()[1], P = out.shape()[2] * out.shape()[3], total = out.numel();
    return visit_cuda_dtype(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<T> || is_16bit_float_v<T>)
        launch<channel_bias_relu_kernel<T, T>>(elementwise_config(total), scope.stream(), data_of<T>(out),
                                               mutable_data_of<T>(out), data_of<T>(bias), O, P, total, p.relu);
    });
  }
#endif
  by_float_dtype(in.dtype(), "conv2d", [&](auto v) { conv2d_typed<decltype(v)>(out, in, weight, bias, p); });
}

void conv2d_backward_input_kernel(const Tensor& gin, const Tensor& gout, const Tensor& weight, const Conv2dParams& p) {
  if (gin.numel() == 0) return;
#if defined(EMBER_WITH_CUDNN)
  if (g_conv.load() != kIm2col) return cudnn_conv2d_backward_input(gin, gout, weight, p);
#endif
  by_float_dtype(gin.dtype(), "conv2d_backward_input",
                 [&](auto v) { conv2d_backward_input_typed<decltype(v)>(gin, gout, weight, p); });
}

void conv2d_backward_weight_kernel(const Tensor& gw, const Tensor& gb, const Tensor& gout, const Tensor& in,
                                   const Conv2dParams& p) {
  if (gb.defined() && gb.numel() > 0) {
    const OpScope scope(gb);
    by_float_dtype(gb.dtype(), "conv2d_backward_bias",
                   [&](auto v) { conv2d_bias_grad<decltype(v)>(gb, gout, scope.stream()); });
  }
  if (gw.numel() == 0) return;
#if defined(EMBER_WITH_CUDNN)
  // An empty batch gives zero gradients, which the path below writes; cuDNN takes no N = 0.
  if (g_conv.load() != kIm2col && gout.numel() > 0) return cudnn_conv2d_backward_weight(gw, gout, in, p);
#endif
  by_float_dtype(gw.dtype(), "conv2d_backward_weight",
                 [&](auto v) { conv2d_backward_weight_typed<decltype(v)>(gw, gout, in, p); });
}

}  // namespace

void set_conv_variant(std::string_view name) { g_conv = parse_conv(name); }

std::string conv_variant() {
  const int v = g_conv.load();
  return v == kAuto ? "auto" : v == kCudnn ? "cudnn" : "im2col";
}

void set_conv_deterministic(bool on) { g_deterministic = on; }
bool conv_deterministic() { return g_deterministic.load(); }
void set_conv_benchmark(bool on) { g_benchmark = on; }
bool conv_benchmark() { return g_benchmark.load(); }

void register_conv() {
  conv2d_stub.set(DeviceType::CUDA, conv2d_kernel);
  conv2d_backward_input_stub.set(DeviceType::CUDA, conv2d_backward_input_kernel);
  conv2d_backward_weight_stub.set(DeviceType::CUDA, conv2d_backward_weight_kernel);
}

}  // namespace ember::kernels::cuda

namespace ember::kernels {

// The im2col path's DeviceScratch blocks, in the order the passes above take them: for
// 16-bit tensors the weight's float32 copy (forward, backward input) or its gradient's
// float32 accumulator (backward weight), then the columns of one chunk, then the chunk's
// float32 output or output gradient (Note [16-bit chunks]). Left out: the bias gradient's
// workspace (N * O sums), taken and freed before these.
std::vector<std::size_t> cuda_conv2d_scratch(ConvPass, const Shape& in, const Shape& weight, const Shape& out,
                                             DType dtype, bool, const Conv2dParams& p) {
#if defined(EMBER_WITH_CUDNN)
  if (cuda::g_conv.load() != cuda::kIm2col) return {};  // cuDNN's workspaces are not modelled
#endif
  const bool half = dtype == DType::BFloat16 || dtype == DType::Float16;
  const int64_t elem = dtype == DType::Float64 ? 8 : 4;
  const cuda::ConvShape cs(in, weight, out, p, elem, half);
  std::vector<std::size_t> blocks;
  if (half) blocks.push_back(static_cast<std::size_t>(cs.O * cs.KK * elem));
  if (!cs.direct) blocks.push_back(static_cast<std::size_t>(cs.chunk * cs.G * cs.KK * cs.P * elem));
  if (half) blocks.push_back(static_cast<std::size_t>(cs.chunk * cs.O * cs.P * elem));
  return blocks;
}

}  // namespace ember::kernels
