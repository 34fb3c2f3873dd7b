// cuDNN's legacy convolution API (cudnn_cnn.h; deprecated in cuDNN 9, still shipped):
// descriptors per call, the algorithm per shape cached for the process. By default it is
// cuDNN's heuristic pick (cudnnGet*Algorithm_v7: no trial runs); in benchmark mode
// (set_conv_benchmark) the first call of a shape times every algorithm on its own
// tensors (cudnnFind*AlgorithmEx, with a workspace from ember's caching allocator) and
// keeps the fastest. Either way the workspace comes from the caching allocator.
// Deterministic mode (set_conv_deterministic) skips algorithms cuDNN marks as not
// deterministic (the atomics-based backward ones). float32 runs on the FMA units (no
// TF32) unless set_allow_tf32(true).
#include "kernels/cuda/conv_cudnn.h"

#include <array>
#include <map>
#include <mutex>
#include <optional>

#include <cudnn.h>

#include "core/runtime.h"
#include "memory/oom.h"
#include "kernels/cuda/cudnn_handle.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/variants.h"

namespace ember::kernels::cuda {

namespace {

// The largest workspace an algorithm may ask for; bigger ones are passed over.
constexpr std::size_t kMaxWorkspace = std::size_t(1) << 30;

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::Float32: return CUDNN_DATA_FLOAT;
    case DType::Float64: return CUDNN_DATA_DOUBLE;
    case DType::Float16: return CUDNN_DATA_HALF;
    case DType::BFloat16: return CUDNN_DATA_BFLOAT16;
    default: EMBER_FAIL("conv2d (cudnn): dtype ", dtype_name(t), " is not supported");
  }
}

int as_int(int64_t v, const char* what) {
  EMBER_CHECK(v >= 0 && v <= INT32_MAX, "conv2d (cudnn): ", what, " ", v, " exceeds 2^31 - 1");
  return int(v);
}

// The descriptors of one convolution: input x [N, C, H, W], weight [O, C / G, kh, kw],
// output y [N, O, OH, OW].
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  std::array<int64_t, 20> key{};  // the algorithm cache's key

  Descriptors(const Tensor& x_t, const Tensor& w_t, const Tensor& y_t, const Conv2dParams& p) {
    const DType dt = x_t.dtype();
    const cudnnDataType_t type = cudnn_type(dt);
    const cudnnDataType_t compute = dt == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    const auto& xs = x_t.shape();
    const auto& ws = w_t.shape();
    const auto& ys = y_t.shape();
    EMBER_CUDA_CHECK(cudnnCreateTensorDescriptor(&x));
    EMBER_CUDA_CHECK(cudnnCreateTensorDescriptor(&y));
    EMBER_CUDA_CHECK(cudnnCreateFilterDescriptor(&w));
    EMBER_CUDA_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    EMBER_CUDA_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, type, as_int(xs[0], "N"), as_int(xs[1], "C"),
                                                 as_int(xs[2], "H"), as_int(xs[3], "W")));
    EMBER_CUDA_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, type, as_int(ys[0], "N"), as_int(ys[1], "O"),
                                                 as_int(ys[2], "OH"), as_int(ys[3], "OW")));
    EMBER_CUDA_CHECK(cudnnSetFilter4dDescriptor(w, type, CUDNN_TENSOR_NCHW, as_int(ws[0], "O"), as_int(ws[1], "C/G"),
                                                 as_int(ws[2], "kh"), as_int(ws[3], "kw")));
    EMBER_CUDA_CHECK(cudnnSetConvolution2dDescriptor(
        conv, as_int(p.padding[0], "padding"), as_int(p.padding[1], "padding"), as_int(p.stride[0], "stride"),
        as_int(p.stride[1], "stride"), as_int(p.dilation[0], "dilation"), as_int(p.dilation[1], "dilation"),
        CUDNN_CROSS_CORRELATION, compute));
    EMBER_CUDA_CHECK(cudnnSetConvolutionGroupCount(conv, as_int(p.groups, "groups")));
    // float32 without TF32 must stay off the tensor cores; 16-bit types want them.
    if (dt == DType::Float32) math = allow_tf32() ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
    if (dt == DType::Float16 || dt == DType::BFloat16) math = CUDNN_TENSOR_OP_MATH;
    EMBER_CUDA_CHECK(cudnnSetConvolutionMathType(conv, math));
    key = {int64_t(dt), xs[0], xs[1], xs[2], xs[3], ws[0], ws[2], ws[3], p.stride[0], p.stride[1], p.padding[0],
           p.padding[1], p.dilation[0], p.dilation[1], p.groups, int64_t(math), conv_deterministic(),
           conv_benchmark(), x_t.device().index, 0};
  }
  ~Descriptors() {
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
};

struct Choice {
  int algo;
  std::size_t workspace;
  cudnnMathType_t math;
};

// cuDNN ranks (algorithm, math type) pairs, and its workspace size is that pair's: the
// call must run with the pair's math type set on the descriptor (cudnn*AlgoPerf_t's
// mathType; PyTorch's Note [behavior of cudnnFind and cudnnGet]).
Choice use(Descriptors& d, const Choice& c) {
  EMBER_CUDA_CHECK(cudnnSetConvolutionMathType(d.conv, c.math));
  return c;
}

// The first of cuDNN's ranked algorithms (by heuristics, or by measured time in benchmark
// mode) that works, fits kMaxWorkspace, keeps the math type asked for and, in
// deterministic mode, is deterministic; cached per key and kind.
template <class Perf, class Get>
Choice choose(Descriptors& d, int kind, const char* op, Get&& get) {
  static std::mutex mu;
  static std::map<std::array<int64_t, 20>, Choice> cache;
  auto key = d.key;
  key.back() = kind;
  {
    std::lock_guard lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return use(d, it->second);
  }
  constexpr int kRequested = 16;
  Perf perf[kRequested];
  int returned = 0;
  get(kRequested, &returned, perf);
  const bool deterministic = conv_deterministic();
  for (int i = 0; i < returned; ++i) {
    const Perf& r = perf[i];
    if (r.status != CUDNN_STATUS_SUCCESS || r.memory > kMaxWorkspace) continue;
    if (deterministic && r.determinism != CUDNN_DETERMINISTIC) continue;
    if (d.math == CUDNN_FMA_MATH && r.mathType != CUDNN_FMA_MATH) continue;  // DEFAULT_MATH allows TF32
    const Choice c{int(r.algo), r.memory, r.mathType};
    std::lock_guard lock(mu);
    cache.emplace(key, c);
    return use(d, c);
  }
  EMBER_FAIL(op, " (cudnn): no algorithm for input [", d.key[1], ", ", d.key[2], ", ", d.key[3], ", ", d.key[4],
             "], weight [", d.key[5], ", ", d.key[2] / std::max<int64_t>(d.key[14], 1), ", ", d.key[6], ", ",
             d.key[7], "]", deterministic ? " in deterministic mode" : "");
}

// The workspace of benchmark mode's trials: kMaxWorkspace, or (when the device cannot
// spare that much) the largest power of two down to 1 MiB it can; the trials skip the
// algorithms that need more. From the caching allocator, returned after the trials.
class TrialWorkspace {
 public:
  TrialWorkspace(int device, cudaStream_t stream) {
    for (std::size_t b = kMaxWorkspace; b >= (std::size_t(1) << 20); b /= 2) {
      try {
        scratch_.emplace(device, stream, b);
        bytes_ = b;
        return;
      } catch (const OutOfMemoryError&) {
      }
    }
    scratch_.emplace(device, stream, 0);
  }
  void* get() const { return scratch_->get(); }
  std::size_t bytes() const { return bytes_; }

 private:
  std::optional<DeviceScratch> scratch_;
  std::size_t bytes_ = 0;
};

// alpha = 1, beta = 0, in the type cuDNN scales by: double for float64, float otherwise.
struct Scale {
  double d1 = 1, d0 = 0;
  float f1 = 1, f0 = 0;
  bool is_double;
  explicit Scale(DType t) : is_double(t == DType::Float64) {}
  const void* one() const { return is_double ? static_cast<const void*>(&d1) : &f1; }
  const void* zero() const { return is_double ? static_cast<const void*>(&d0) : &f0; }
};

}  // namespace

void cudnn_conv2d(const Tensor& out, const Tensor& in, const Tensor& weight, const Conv2dParams& p) {
  const OpScope scope(out);
  const int dev = out.device().index;
  const cudnnHandle_t h = cudnn_handle(dev, scope.stream());
  Descriptors d(in, weight, out, p);
  const Choice c = choose<cudnnConvolutionFwdAlgoPerf_t>(d, 0, "conv2d", [&](int n, int* got, auto* perf) {
    if (!conv_benchmark()) {
      EMBER_CUDA_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, n, got, perf));
      return;
    }
    const TrialWorkspace ws(dev, scope.stream());
    EMBER_CUDA_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, d.x, in.data_ptr(), d.w, weight.data_ptr(), d.conv, d.y,
                                                            out.data_ptr(), n, got, perf, ws.get(), ws.bytes()));
  });
  const DeviceScratch ws(dev, scope.stream(), c.workspace);
  const Scale s(out.dtype());
  EMBER_CUDA_CHECK(cudnnConvolutionForward(h, s.one(), d.x, in.data_ptr(), d.w, weight.data_ptr(), d.conv,
                                            cudnnConvolutionFwdAlgo_t(c.algo), ws.get(), c.workspace, s.zero(), d.y,
                                            out.data_ptr()));
}

void cudnn_conv2d_backward_input(const Tensor& gin, const Tensor& gout, const Tensor& weight, const Conv2dParams& p) {
  const OpScope scope(gin);
  const int dev = gin.device().index;
  const cudnnHandle_t h = cudnn_handle(dev, scope.stream());
  Descriptors d(gin, weight, gout, p);
  const Choice c =
      choose<cudnnConvolutionBwdDataAlgoPerf_t>(d, 1, "conv2d_backward_input", [&](int n, int* got, auto* perf) {
        if (!conv_benchmark()) {
          EMBER_CUDA_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, n, got, perf));
          return;
        }
        const TrialWorkspace ws(dev, scope.stream());
        EMBER_CUDA_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(h, d.w, weight.data_ptr(), d.y, gout.data_ptr(),
                                                                     d.conv, d.x, gin.data_ptr(), n, got, perf,
                                                                     ws.get(), ws.bytes()));
      });
  const DeviceScratch ws(dev, scope.stream(), c.workspace);
  const Scale s(gin.dtype());
  EMBER_CUDA_CHECK(cudnnConvolutionBackwardData(h, s.one(), d.w, weight.data_ptr(), d.y, gout.data_ptr(), d.conv,
                                                 cudnnConvolutionBwdDataAlgo_t(c.algo), ws.get(), c.workspace,
                                                 s.zero(), d.x, gin.data_ptr()));
}

void cudnn_conv2d_backward_weight(const Tensor& gw, const Tensor& gout, const Tensor& in, const Conv2dParams& p) {
  const OpScope scope(gw);
  const int dev = gw.device().index;
  const cudnnHandle_t h = cudnn_handle(dev, scope.stream());
  Descriptors d(in, gw, gout, p);
  const Choice c =
      choose<cudnnConvolutionBwdFilterAlgoPerf_t>(d, 2, "conv2d_backward_weight", [&](int n, int* got, auto* perf) {
        if (!conv_benchmark()) {
          EMBER_CUDA_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, n, got, perf));
          return;
        }
        const TrialWorkspace ws(dev, scope.stream());
        EMBER_CUDA_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d.x, in.data_ptr(), d.y, gout.data_ptr(),
                                                                       d.conv, d.w, gw.data_ptr(), n, got, perf,
                                                                       ws.get(), ws.bytes()));
      });
  const DeviceScratch ws(dev, scope.stream(), c.workspace);
  const Scale s(gw.dtype());
  EMBER_CUDA_CHECK(cudnnConvolutionBackwardFilter(h, s.one(), d.x, in.data_ptr(), d.y, gout.data_ptr(), d.conv,
                                                   cudnnConvolutionBwdFilterAlgo_t(c.algo), ws.get(), c.workspace,
                                                   s.zero(), d.w, gw.data_ptr()));
}

}  // namespace ember::kernels::cuda
