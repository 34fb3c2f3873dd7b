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
    buf = first_step ? d : T(momentum) * buf + T(1 - dampening) * d;
    d = nesterov ? d + T(momentum) * buf : buf;
  }
  p -= T(lr) * d;
}

// No branches or conversions left for the loop over elements (so it vectorizes).
template <class T>
struct AdamUpdate::Prepared {
  T decay, l2, b1, one_minus_b1, b2, one_minus_b2, inv_bc2_sqrt, eps, step;
  EMBER_HD void operator()(T& p, T g, T& m, T& v) const {
    using std::sqrt;
    p *= decay;
    g += l2 * p;
    m = b1 * m + one_minus_b1 * g;
    v = b2 * v + one_minus_b2 * g * g;
    p -= step * m / (sqrt(v) * inv_bc2_sqrt + eps);
  }
};

template <class T>
EMBER_HD AdamUpdate::Prepared<T> AdamUpdate::prepare() const {
  return {T(decoupled ? 1 - lr * weight_decay : 1), T(decoupled ? 0 : weight_decay), T(beta1), T(1 - beta1),
          T(beta2), T(1 - beta2), T(1 / bias_correction2_sqrt), T(eps), T(lr / bias_correction1)};
}

}  // namespace ember::kernels::ops
