// The parameters of the fused optimizer updates: what core's sgd_step_ / adam_step_ fill
// from their options and pass through the op table (core/dispatch.h) to the update
// kernels. The per-element rules, the structs' call operator and Adam's Prepared, are
// declared here and defined once, for the CPU loops and the CUDA kernels alike, in
// kernels/common/optim_ops.h, which the kernels include; core only fills the numbers.
#pragma once

#include <cmath>

#include "core/macros.h"

namespace ember::kernels::ops {

struct SgdUpdate {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, first_step;
  // p, buf updated in place from the gradient g.
  template <class T>
  EMBER_HD void operator()(T& p, T g, T& buf) const;
};

struct AdamUpdate {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;                                  // AdamW
  double bias_correction1, bias_correction2_sqrt;  // 1 - b1^t, sqrt(1 - b2^t)

  // This update at the 1-based step t with learning rate lr. Core calls it on the host for
  // an ordinary step, the capturable kernels on the device with t and lr read from device
  // memory: one formula, so both give the same corrections wherever pow rounds alike (the
  // CPU, the emulator; a GPU's pow may differ from the host's by an ulp). In double, not
  // the parameter's type as PyTorch's capturable Adam: in float, 1 - b2^t cancels (off by
  // 1.3e-5 relative at t = 1 for b2 = 0.999).
  EMBER_HD AdamUpdate at(double t, double lr_t) const {
    using std::pow;
    using std::sqrt;
    AdamUpdate u = *this;
    u.lr = lr_t;
    u.bias_correction1 = 1 - pow(beta1, t);
    u.bias_correction2_sqrt = sqrt(1 - pow(beta2, t));
    return u;
  }

  // The per-element rule with its constants folded once, in the parameter's type T.
  template <class T>
  struct Prepared;
  template <class T>
  EMBER_HD Prepared<T> prepare() const;
};

}  // namespace ember::kernels::ops
