// The update rules of the optimizers, per element, shared by the CPU backend and the
// CUDA kernels: the call operators that core/optim_update.h declares. They follow
// PyTorch exactly (tests/refcases/README.md): SGD's momentum buffer starts as the first
// gradient, no dampening by default, Nesterov uses g + momentum * buf; Adam adds L2
// weight decay to g, AdamW scales p by 1 - lr * wd; bias corrections use the 1-based
// step t and eps is added after sqrt(v) / sqrt(1 - b2^t).
#pragma once

#include <cmath>

#include "core/optim_update.h"

namespace ember::kernels::ops {

template <class T>
EMBER_HD void SgdUpdate::operator()(T& p, T g, T& buf) const {
  T d = g + T(weight_decay) * p;
  if (momentum != 0) {
    const T b = first_step ? d : T(momentum) * buf + T(1 - dampening) * d;
    buf = b;
    d = nesterov ? d + T(momentum) * b : b;
  }
  p -= T(lr) * d;
}

// No branches or conversions left for the loop over elements (so it vectorizes). Each
// of p, m and v is read once and written once, after the math: written back as it went,
// a store could (for the compiler) change a value still to be read, and the CPU loop ran
// 3x slower (bench_fused AdamStep, 2.70 against 0.87 ms, on an AVX2-only AMD EPYC Zen 1).
template <class T>
struct AdamUpdate::Prepared {
  T decay, l2, b1, one_minus_b1, b2, one_minus_b2, inv_bc2_sqrt, eps, step;
  EMBER_HD void operator()(T& p_io, T g, T& m_io, T& v_io) const {
    using std::sqrt;
    const T p = p_io * decay;
    g += l2 * p;
    const T m = b1 * m_io + one_minus_b1 * g;
    const T v = b2 * v_io + one_minus_b2 * g * g;
    m_io = m;
    v_io = v;
    p_io = p - step * m / (sqrt(v) * inv_bc2_sqrt + eps);
  }
};

template <class T>
EMBER_HD AdamUpdate::Prepared<T> AdamUpdate::prepare() const {
  return {T(decoupled ? 1 - lr * weight_decay : 1), T(decoupled ? 0 : weight_decay), T(beta1), T(1 - beta1),
          T(beta2), T(1 - beta2), T(1 / bias_correction2_sqrt), T(eps), T(lr / bias_correction1)};
}

}  // namespace ember::kernels::ops
