// Fused optimizer updates on the GPU: SGD (momentum, dampening, Nesterov, weight decay)
// and Adam / AdamW over a whole list of parameters in one launch (multi_tensor.cuh). The
// per-element math is the functor the CPU backend uses (kernels/common/optim_ops.h),
// called the same way as kernels/cpu/optim.cpp calls it; only the iteration differs.
//
// Types: P is the parameter's (and its gradient's) storage type, S the optimizer state's
// type, which is also the type the update is computed in: (float, float), (double,
// double), or 16-bit parameters with float32 state ((__nv_bfloat16, float), (__half,
// float)); a 16-bit parameter is rounded once per step, when written.
//
// Memory-bound, like every optimizer step (a few FLOPs per 4-byte load). Bytes per element
// are in each op's comment; the ceiling is the DRAM bandwidth (H200: 4.8 TB/s).
#pragma once

#include <cstdint>
#include <span>
#include <type_traits>

#include "base/error.h"
#include "kernels/common/optim_ops.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/multi_tensor.cuh"

namespace ember::kernels::cuda {

// One parameter of an SGD step: numel elements at each pointer; momentum_buffer may be
// null when momentum is 0.
template <class P, class S = P>
struct SgdTensor {
  P* param;
  const P* grad;
  S* momentum_buffer;
  int64_t numel;
};

// One parameter of an Adam / AdamW step.
template <class P, class S = P>
struct AdamTensor {
  P* param;
  const P* grad;
  S* exp_avg;
  S* exp_avg_sq;
  int64_t numel;
};

namespace detail {

template <class P, class S>
constexpr bool kOptimTypes =
    (std::is_same_v<P, S> && (std::is_same_v<S, float> || std::is_same_v<S, double>)) ||
    ((std::is_same_v<P, __nv_bfloat16> || std::is_same_v<P, __half>) && std::is_same_v<S, float>);

// SGD: p -= lr * d, d from g + wd * p and the momentum buffer (ops::SgdUpdate).
// Bytes per element, float32: momentum reads p, g, buf and writes p, buf (20 B); on the
// first step buf is only written (16 B); without momentum, p, g, p (12 B). 16-bit
// parameters with float32 buffers: 14 B, 12 B and 6 B.
template <class P, class S>
struct SgdOp {
  static constexpr int kDepth = 3;  // param, grad, momentum buffer (null without momentum)
  using Shape = TileShape<16 / sizeof(S)>;
  static constexpr int64_t kTile = Shape::kTile;
  ops::SgdUpdate u;

  __device__ __forceinline__ void operator()(void* const (&ptr)[kDepth], int64_t n, int64_t base) const {
    P* p = static_cast<P*>(ptr[0]);
    const P* g = static_cast<const P*>(ptr[1]);
    S* buf = static_cast<S*>(ptr[2]);
    // Note [Aligned body] (multi_tensor.cuh): the first `head` elements one per thread,
    // then whole vectors from p + head.
    const int head = body_head<Shape::kVec>(p, g, buf);
    const bool vec = head >= 0;
    const int64_t h = vec ? head : 0;
    if (base == 0 && int64_t(threadIdx.x) < h && int64_t(threadIdx.x) < n) {
      const int64_t j = threadIdx.x;
      S pe = S(widen(p[j])), ge = S(widen(g[j])), be = buf && !u.first_step ? buf[j] : S(0);
      u(pe, ge, be);
      p[j] = round_to<P>(pe);
      if (buf) buf[j] = be;
    }
    p += h, g += h, n -= h;
    if (buf) buf += h;
    S pv[Shape::kElems], gv[Shape::kElems], bv[Shape::kElems] = {};
    load_tile<Shape>(p, n, base, vec, pv);
    load_tile<Shape>(g, n, base, vec, gv);
    if (buf && !u.first_step) load_tile<Shape>(buf, n, base, vec, bv);  // the first step overwrites it
    EMBER_UNROLL
    for (int e = 0; e < Shape::kElems; ++e) u(pv[e], gv[e], bv[e]);
    store_tile<Shape>(p, n, base, vec, pv);
    if (buf) store_tile<Shape>(buf, n, base, vec, bv);
  }
};

// Adam / AdamW (ops::AdamUpdate::Prepared): reads p, g, m, v and writes p, m, v: 28 B per
// float32 element, 56 B per float64 one, 22 B for a 16-bit parameter with float32 m, v.
template <class P, class S>
struct AdamOp {
  static constexpr int kDepth = 4;  // param, grad, exp_avg, exp_avg_sq
  using Shape = TileShape<16 / sizeof(S)>;
  static constexpr int64_t kTile = Shape::kTile;
  ops::AdamUpdate::Prepared<S> step;

  __device__ __forceinline__ void operator()(void* const (&ptr)[kDepth], int64_t n, int64_t base) const {
    P* p = static_cast<P*>(ptr[0]);
    const P* g = static_cast<const P*>(ptr[1]);
    S* m = static_cast<S*>(ptr[2]);
    S* v = static_cast<S*>(ptr[3]);
    // Note [Aligned body] (multi_tensor.cuh), as SgdOp.
    const int head = body_head<Shape::kVec>(p, g, m, v);
    const bool vec = head >= 0;
    const int64_t h = vec ? head : 0;
    if (base == 0 && int64_t(threadIdx.x) < h && int64_t(threadIdx.x) < n) {
      const int64_t j = threadIdx.x;
      S pe = S(widen(p[j])), ge = S(widen(g[j])), me = m[j], ve = v[j];
      step(pe, ge, me, ve);
      p[j] = round_to<P>(pe), m[j] = me, v[j] = ve;
    }
    p += h, g += h, m += h, v += h, n -= h;
    S pv[Shape::kElems], gv[Shape::kElems], mv[Shape::kElems], vv[Shape::kElems];
    load_tile<Shape>(p, n, base, vec, pv);
    load_tile<Shape>(g, n, base, vec, gv);
    load_tile<Shape>(m, n, base, vec, mv);
    load_tile<Shape>(v, n, base, vec, vv);
    EMBER_UNROLL
    for (int e = 0; e < Shape::kElems; ++e) step(pv[e], gv[e], mv[e], vv[e]);
    store_tile<Shape>(p, n, base, vec, pv);
    store_tile<Shape>(m, n, base, vec, mv);
    store_tile<Shape>(v, n, base, vec, vv);
  }
};

// The capturable forms (CUDA graphs): the learning rate, and Adam's 1-based step, read
// from device memory when the kernel runs, so that a replay uses that replay's values.
// Each block reads them and folds the constants once per tile (two double pow for Adam: a
// few hundred cycles against a tile's memory traffic; the step stays memory-bound).
template <class P, class S>
struct SgdCapturableOp {
  static constexpr int kDepth = SgdOp<P, S>::kDepth;
  using Shape = typename SgdOp<P, S>::Shape;
  static constexpr int64_t kTile = Shape::kTile;
  ops::SgdUpdate u;
  const double* lr;  // [1]

  __device__ __forceinline__ void operator()(void* const (&ptr)[kDepth], int64_t n, int64_t base) const {
    SgdOp<P, S> op{u};
    op.u.lr = *lr;
    op(ptr, n, base);
  }
};

template <class P, class S>
struct AdamCapturableOp {
  static constexpr int kDepth = AdamOp<P, S>::kDepth;
  using Shape = typename AdamOp<P, S>::Shape;
  static constexpr int64_t kTile = Shape::kTile;
  ops::AdamUpdate u;
  const double* lr;    // [1]
  const double* step;  // [1], 1-based

  __device__ __forceinline__ void operator()(void* const (&ptr)[kDepth], int64_t n, int64_t base) const {
    const AdamOp<P, S> op{u.at(*step, *lr).template prepare<S>()};
    op(ptr, n, base);
  }
};

// What every tensor of a list must satisfy; `what` names the launcher.
inline void check_optim_tensor(const char* what, size_t i, int64_t numel, bool pointers_present) {
  EMBER_CHECK(numel >= 0, what, ": tensor ", i, " has ", numel, " elements");
  EMBER_CHECK(numel == 0 || pointers_present, what, ": tensor ", i, " (", numel,
              " elements) lacks a pointer (param, grad and every state buffer are required)");
}

// The launch of every tensor of a list with the update op, after the checks.
template <class P, class S, class Op>
void launch_sgd(std::span<const SgdTensor<P, S>> tensors, bool momentum, const Op& op, cudaStream_t stream) {
  static_assert(kOptimTypes<P, S>, "sgd_update: (float, float), (double, double) or (16-bit, float)");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SgdTensor<P, S>& t = tensors[i];
    check_optim_tensor("sgd_update", i, t.numel, t.param && t.grad && (t.momentum_buffer || !momentum));
  }
  multi_tensor_apply(
      tensors.size(),
      [&](size_t i) {
        const SgdTensor<P, S>& t = tensors[i];
        return TensorPtrs<3>{{t.param, const_cast<P*>(t.grad), momentum ? t.momentum_buffer : nullptr}, t.numel};
      },
      op, stream);
}

template <class P, class S, class Op>
void launch_adam(std::span<const AdamTensor<P, S>> tensors, const Op& op, cudaStream_t stream) {
  static_assert(kOptimTypes<P, S>, "adam_update: (float, float), (double, double) or (16-bit, float)");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const AdamTensor<P, S>& t = tensors[i];
    check_optim_tensor("adam_update", i, t.numel, t.param && t.grad && t.exp_avg && t.exp_avg_sq);
  }
  multi_tensor_apply(
      tensors.size(),
      [&](size_t i) {
        const AdamTensor<P, S>& t = tensors[i];
        return TensorPtrs<4>{{t.param, const_cast<P*>(t.grad), t.exp_avg, t.exp_avg_sq}, t.numel};
      },
      op, stream);
}

}  // namespace detail

static_assert(TensorListMeta<3>::kMaxTensors == 95 && TensorListMeta<4>::kMaxTensors == 79,
              "update the tensors-per-launch figures in the comments below");

// The launchers name their types (sgd_update<float>(list, ...), sgd_update<__nv_bfloat16,
// float>(...)); the list is any contiguous range of SgdTensor / AdamTensor.
//
// One SGD step (u: ops::SgdUpdate, as core's sgd_step_ builds it) of every tensor, in
// place, in ceil(tensors / 95) launches (one for up to 95 non-empty tensors). Pointers
// may have any alignment (16-byte aligned ones are read as vectors).
template <class P, class S = P>
void sgd_update(std::type_identity_t<std::span<const SgdTensor<P, S>>> tensors, const ops::SgdUpdate& u,
                cudaStream_t stream) {
  detail::launch_sgd(tensors, u.momentum != 0, detail::SgdOp<P, S>{u}, stream);
}

// One Adam or AdamW step (u: ops::AdamUpdate, as core's adam_step_ builds it, with the
// step's bias corrections) of every tensor, in place, in ceil(tensors / 79) launches.
template <class P, class S = P>
void adam_update(std::type_identity_t<std::span<const AdamTensor<P, S>>> tensors, const ops::AdamUpdate& u,
                 cudaStream_t stream) {
  detail::launch_adam(tensors, detail::AdamOp<P, S>{u.prepare<S>()}, stream);
}

// The capturable forms: as above, with the learning rate (and Adam's 1-based step) read
// from the device pointers lr and step (one double each) when the kernels run; u's lr and
// bias corrections are not used (Adam's come from ops::AdamUpdate::at).
template <class P, class S = P>
void sgd_update_capturable(std::type_identity_t<std::span<const SgdTensor<P, S>>> tensors, const ops::SgdUpdate& u,
                           const double* lr, cudaStream_t stream) {
  EMBER_CHECK(lr, "sgd_update_capturable: no learning rate pointer");
  detail::launch_sgd(tensors, u.momentum != 0, detail::SgdCapturableOp<P, S>{u, lr}, stream);
}

template <class P, class S = P>
void adam_update_capturable(std::type_identity_t<std::span<const AdamTensor<P, S>>> tensors,
                            const ops::AdamUpdate& u, const double* lr, const double* step, cudaStream_t stream) {
  EMBER_CHECK(lr && step, "adam_update_capturable: no learning rate or step pointer");
  detail::launch_adam(tensors, detail::AdamCapturableOp<P, S>{u, lr, step}, stream);
}

}  // namespace ember::kernels::cuda
