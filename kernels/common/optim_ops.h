// The update rules of the optimizers, per element, shared by the CPU backend and the
// CUDA kernels. They follow PyTorch exactly (see the refcases README): SGD's momentum
// buffer starts as the first gradient, no dampening by default, Nesterov uses
// g + momentum * buf; Adam adds L2 weight decay to g, AdamW scales p by 1 - lr * wd;
// bias corrections use the 1-based step t and eps is added after sqrt(v) / sqrt(1 - b2^t).
#pragma once

#include <cmath>

#include "core/macros.h"

namespace ember::kernels::ops {

struct SgdUpdate {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, first_step;
  template <class T>
  EMBER_HD void operator()(T& p, T g, T& buf) const {
    T d = g + T(weight_decay) * p;
    if (momentum != 0) {
      buf = first_step ? d : T(momentum) * buf + T(1 - dampening) * d;
      d = nesterov ? d + T(momentum) * buf : buf;
    }
    p -= T(lr) * d;
  }
};

struct AdamUpdate {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;                    // AdamW
  double bias_correction1, bias_correction2_sqrt;  // 1 - b1^t, sqrt(1 - b2^t)
  template <class T>
  EMBER_HD void operator()(T& p, T g, T& m, T& v) const {
    using std::sqrt;
    if (decoupled)
      p *= T(1 - lr * weight_decay);
    else
      g += T(weight_decay) * p;
    m = T(beta1) * m + T(1 - beta1) * g;
    v = T(beta2) * v + T(1 - beta2) * g * g;
    const T denom = sqrt(v) / T(bias_correction2_sqrt) + T(eps);
    p -= T(lr / bias_correction1) * m / denom;
  }
};

}  // namespace ember::kernels::ops
