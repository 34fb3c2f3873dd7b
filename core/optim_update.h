// The parameters of the fused optimizer updates: what core's sgd_step_ / adam_step_ fill
// from their options and pass through the op table (core/dispatch.h) to the update
// kernels. The per-element rules, the structs' call operator and Adam's Prepared, are
// declared here and defined once, for the CPU loops and the CUDA kernels alike, in
// kernels/common/optim_ops.h, which the kernels include; core only fills the numbers.
#pragma once

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

  // The per-element rule with its constants folded once, in the parameter's type T.
  template <class T>
  struct Prepared;
  template <class T>
  EMBER_HD Prepared<T> prepare() const;
};

}  // namespace ember::kernels::ops
