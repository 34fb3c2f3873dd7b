// The CUDA slots of the fused ops: cross entropy, layer norm, batch-norm statistics,
// embedding backward, multi-tensor SGD / Adam and dropout, each the host launcher of its
// hand-written kernel (the .cuh files below, tested through the emulator in tests/cuda).
// Core has checked shapes, dtypes and indices (core/ops_fused.cpp, core/ops_optim.cpp);
// workspaces come from the device's caching allocator, on the op's stream, so they are
// reused only after the kernels that read them.
#include "kernels/cuda/device.h"
#include "kernels/cuda/batch_norm.cuh"
#include "kernels/cuda/cross_entropy.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/norm.cuh"
#include "kernels/cuda/optim.cuh"
#include "kernels/cuda/random.cuh"

#include <algorithm>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"

namespace ember::kernels::cuda {
namespace {

// Device memory for a kernel's scratch, freed when the tensor goes (stream-ordered). Never
// empty: the launchers take a null workspace for a missing one, even when it needs 0 bytes.
Tensor workspace(const Tensor& like, size_t bytes) {
  return empty({static_cast<int64_t>(std::max<size_t>(bytes, 16))}, {kUInt8, like.device()});
}

template <class T>
T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// f(Tag<T>{}) for the floating dtypes; kWideOnly: float32 and float64 alone.
template <bool kWideOnly = false, class F>
void visit_floating(DType t, const char* op, F&& f) {
  const bool ok = t == kFloat32 || t == kFloat64 || (!kWideOnly && (t == kFloat16 || t == kBFloat16));
  EMBER_CHECK(ok, op, " (cuda): dtype ", dtype_name(t), " is not supported");
  visit_cuda_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr bool wide = std::is_same_v<T, float> || std::is_same_v<T, double>;
    if constexpr (wide || (!kWideOnly && (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>))) f(tag);
  });
}

LossReduction to_cuda(kernels::LossReduction r) {
  return r == kernels::LossReduction::kNone ? LossReduction::kNone
                                            : (r == kernels::LossReduction::kMean ? LossReduction::kMean
                                                                                   : LossReduction::kSum);
}

template <class T>
const compute_t<T>* optional_ptr(const Tensor& t) {
  return t.defined() ? static_cast<const compute_t<T>*>(t.data_ptr()) : nullptr;
}

void cross_entropy_kernel(const Tensor& loss, const Tensor& stats, const Tensor& total_weight, const Tensor& logits,
                          const Tensor& target, const kernels::CrossEntropyOptions& o) {
  const OpScope scope(logits);
  visit_floating<true>(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = logits.size(0), c = logits.size(1);
    const LossReduction red = to_cuda(o.reduction);
    const bool reduce = red != LossReduction::kNone;
    // A mean or sum reduces per-row losses (a scratch row here) in the kernel's fixed order.
    const Tensor rows = reduce ? empty({n}, {logits.dtype(), logits.device()}) : loss;
    const Tensor ws = reduce ? workspace(logits, cross_entropy_workspace_bytes<T>(n, c)) : Tensor();
    cross_entropy_forward<T>(ptr<const T>(logits), ptr<const int64_t>(target), ptr<T>(rows), ptr<T>(stats), n, c,
                             o.ignore_index, red, optional_ptr<T>(o.weight), o.label_smoothing,
                             reduce ? ptr<T>(loss) : nullptr, reduce ? ptr<T>(total_weight) : nullptr,
                             reduce ? ws.data_ptr() : nullptr, scope.stream());
  });
}

void cross_entropy_backward_kernel(const Tensor& dlogits, const Tensor& logits, const Tensor& target,
                                   const Tensor& stats, const Tensor& grad, const Tensor& total_weight,
                                   const kernels::CrossEntropyOptions& o) {
  const OpScope scope(logits);
  visit_floating<true>(logits.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cross_entropy_backward<T>(ptr<const T>(logits), ptr<const int64_t>(target), ptr<const T>(stats),
                              ptr<const T>(grad), ptr<const T>(total_weight), optional_ptr<T>(o.weight),
                              optional_ptr<T>(o.weight_sum), o.label_smoothing, ptr<T>(dlogits), logits.size(0),
                              logits.size(1), o.ignore_index, to_cuda(o.reduction), scope.stream());
  });
}

void layer_norm_kernel(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                       const Tensor& bias, double eps) {
  const OpScope scope(x);
  visit_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = compute_t<T>;
    layer_norm<T>(ptr<const T>(x), ptr<const T>(weight), ptr<const T>(bias), ptr<T>(y), ptr<A>(mean), ptr<A>(rstd),
                  x.size(0), x.size(1), eps, scope.stream());
  });
}

void layer_norm_backward_kernel(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                                const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight) {
  const OpScope scope(x);
  visit_floating(x.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = compute_t<T>;
    const int64_t rows = x.size(0), cols = x.size(1);
    // The kernel always writes dx: a frozen input still gets a scratch one.
    const Tensor gx = dx.defined() ? dx : empty(x.shape(), {x.dtype(), x.device()});
    const bool params = dweight.defined() || dbias.defined();
    const Tensor ws = params ? workspace(x, layer_norm_backward_workspace_bytes<T>(rows, cols)) : Tensor();
    layer_norm_backward<T>(ptr<const T>(dy), ptr<const T>(x), ptr<const A>(mean), ptr<const A>(rstd),
                           ptr<const T>(weight), ptr<T>(gx), ptr<T>(dweight), ptr<T>(dbias), rows, cols,
                           params ? ws.data_ptr() : nullptr, scope.stream());
  });
}

void batch_norm_stats_kernel(const Tensor& mean, const Tensor& var, const Tensor& running_mean,
                             const Tensor& running_var, const Tensor& x, double momentum) {
  const OpScope scope(x);
  visit_floating(x.dtype(), "batch_norm_stats", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = compute_t<T>;
    const int64_t n = x.size(0), c = x.size(1), hw = x.size(2);
    const Tensor ws = workspace(x, batch_norm_stats_workspace_bytes<T>(n, c, hw));
    batch_norm_stats<T>(ptr<const T>(x), n, c, hw, ptr<A>(mean), ptr<A>(var), nullptr, ptr<A>(running_mean),
                        ptr<A>(running_var), momentum, ws.data_ptr(), scope.stream());
  });
}

void embedding_backward_kernel(const Tensor& grad_weight, const Tensor& grad_output, const Tensor& indices) {
  const OpScope scope(grad_weight);
  visit_floating(grad_weight.dtype(), "embedding_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = indices.numel();
    const size_t bytes = embedding_backward_workspace_bytes(n);
    const Tensor ws = workspace(grad_weight, bytes);
    // A bad index is skipped here and reported by core's check_index_range, queued before.
    embedding_backward<T, int64_t>(ptr<const T>(grad_output), ptr<const int64_t>(indices), ptr<T>(grad_weight), n,
                                   grad_weight.size(0), grad_weight.size(1), ws.data_ptr(), bytes, nullptr,
                                   scope.stream());
  });
}

template <class T>
std::vector<SgdTensor<T>> sgd_list(std::span<const Tensor> params, std::span<const Tensor> grads,
                                   std::span<const Tensor> bufs) {
  std::vector<SgdTensor<T>> list;
  for (size_t i = 0; i < params.size(); ++i)
    list.push_back({ptr<T>(params[i]), ptr<const T>(grads[i]), ptr<T>(bufs[i]), params[i].numel()});
  return list;
}

template <class T>
std::vector<AdamTensor<T>> adam_list(std::span<const Tensor> params, std::span<const Tensor> grads,
                                     std::span<const Tensor> m, std::span<const Tensor> v) {
  std::vector<AdamTensor<T>> list;
  for (size_t i = 0; i < params.size(); ++i)
    list.push_back({ptr<T>(params[i]), ptr<const T>(grads[i]), ptr<T>(m[i]), ptr<T>(v[i]), params[i].numel()});
  return list;
}

void multi_sgd_kernel(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> bufs,
                      const ops::SgdUpdate& u) {
  if (params.empty()) return;
  const OpScope scope(params[0]);
  visit_floating<true>(params[0].dtype(), "multi_sgd_update", [&](auto tag) {
    using T = typename decltype(tag)::type;
    sgd_update<T>(sgd_list<T>(params, grads, bufs), u, scope.stream());
  });
}

void multi_adam_kernel(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> m,
                       std::span<const Tensor> v, const ops::AdamUpdate& u) {
  if (params.empty()) return;
  const OpScope scope(params[0]);
  visit_floating<true>(params[0].dtype(), "multi_adam_update", [&](auto tag) {
    using T = typename decltype(tag)::type;
    adam_update<T>(adam_list<T>(params, grads, m, v), u, scope.stream());
  });
}

void multi_sgd_capturable_kernel(std::span<const Tensor> params, std::span<const Tensor> grads,
                                 std::span<const Tensor> bufs, const ops::SgdUpdate& u, const Tensor& lr) {
  if (params.empty()) return;
  const OpScope scope(params[0]);
  visit_floating<true>(params[0].dtype(), "multi_sgd_update_capturable", [&](auto tag) {
    using T = typename decltype(tag)::type;
    sgd_update_capturable<T>(sgd_list<T>(params, grads, bufs), u, ptr<const double>(lr), scope.stream());
  });
}

void multi_adam_capturable_kernel(std::span<const Tensor> params, std::span<const Tensor> grads,
                                  std::span<const Tensor> m, std::span<const Tensor> v, const ops::AdamUpdate& u,
                                  const Tensor& lr, const Tensor& step) {
  if (params.empty()) return;
  const OpScope scope(params[0]);
  visit_floating<true>(params[0].dtype(), "multi_adam_update_capturable", [&](auto tag) {
    using T = typename decltype(tag)::type;
    adam_update_capturable<T>(adam_list<T>(params, grads, m, v), u, ptr<const double>(lr), ptr<const double>(step),
                              scope.stream());
  });
}

void dropout_kernel(const Tensor& out, const Tensor& keep, const Tensor& x, double p, PhiloxState state) {
  const OpScope scope(x);
  visit_floating(x.dtype(), "dropout", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dropout<T>(ptr<const T>(x), ptr<T>(out), ptr<uint8_t>(keep), x.numel(), p, state.seed, state.offset,
               scope.stream());
  });
}

void dropout_backward_slot(const Tensor& grad_input, const Tensor& grad_output, const Tensor& keep, double p) {
  const OpScope scope(grad_output);
  visit_floating(grad_output.dtype(), "dropout_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dropout_backward<T>(ptr<const T>(grad_output), ptr<const uint8_t>(keep), ptr<T>(grad_input),
                        grad_output.numel(), p, scope.stream());
  });
}

}  // namespace

void register_fused() {
  cross_entropy_stub.set(DeviceType::CUDA, cross_entropy_kernel);
  cross_entropy_backward_stub.set(DeviceType::CUDA, cross_entropy_backward_kernel);
  layer_norm_stub.set(DeviceType::CUDA, layer_norm_kernel);
  layer_norm_backward_stub.set(DeviceType::CUDA, layer_norm_backward_kernel);
  batch_norm_stats_stub.set(DeviceType::CUDA, batch_norm_stats_kernel);
  embedding_backward_stub.set(DeviceType::CUDA, embedding_backward_kernel);
  multi_sgd_update_stub.set(DeviceType::CUDA, multi_sgd_kernel);
  multi_adam_update_stub.set(DeviceType::CUDA, multi_adam_kernel);
  multi_sgd_update_capturable_stub.set(DeviceType::CUDA, multi_sgd_capturable_kernel);
  multi_adam_update_capturable_stub.set(DeviceType::CUDA, multi_adam_capturable_kernel);
  dropout_stub.set(DeviceType::CUDA, dropout_kernel);
  dropout_backward_stub.set(DeviceType::CUDA, dropout_backward_slot);
}

}  // namespace ember::kernels::cuda
