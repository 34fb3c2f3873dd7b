// Fused optimizer updates: argument checks, then one in-place kernel per parameter whose
// math is the shared functor of kernels/common/optim_ops.h.
#include <cmath>

#include "core/dispatch.h"
#include "core/op_utils.h"

namespace ember {
namespace {

void check_state(const char* op, const Tensor& param, const Tensor& t, const char* what) {
  EMBER_CHECK(t.defined() && t.shape() == param.shape() && t.dtype() == param.dtype() && t.device() == param.device() &&
                  t.is_contiguous(),
              op, ": ", what, " must be a contiguous ", dtype_name(param.dtype()), " tensor of shape ",
              shape_str(param.shape()), " on ", param.device().str());
}

}  // namespace

void sgd_step_(const Tensor& param, const Tensor& grad, const Tensor& buf, const SgdStepOptions& o, bool first_step) {
  EMBER_OP_SITE("sgd_step");
  detail::check_defined("sgd_step_", param, "param");
  EMBER_CHECK(param.is_contiguous(), "sgd_step_: param must be contiguous");
  Tensor g = grad.detach().to(param.dtype()).contiguous();
  check_state("sgd_step_", param, g, "grad");
  if (o.momentum != 0) check_state("sgd_step_", param, buf, "momentum_buffer");
  kernels::ops::SgdUpdate u{o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, first_step};
  if (param.numel() > 0) kernels::sgd_update_stub(param.device(), param, g, o.momentum != 0 ? buf : Tensor(), u);
}

void adam_step_(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamStepOptions& o) {
  EMBER_OP_SITE("adam_step");
  detail::check_defined("adam_step_", param, "param");
  EMBER_CHECK(param.is_contiguous(), "adam_step_: param must be contiguous");
  EMBER_CHECK(o.step >= 1, "adam_step_: step is 1-based, got ", o.step);
  Tensor g = grad.detach().to(param.dtype()).contiguous();
  check_state("adam_step_", param, g, "grad");
  check_state("adam_step_", param, m, "exp_avg");
  check_state("adam_step_", param, v, "exp_avg_sq");
  const double t = static_cast<double>(o.step);
  kernels::ops::AdamUpdate u{o.lr,
                             o.beta1,
                             o.beta2,
                             o.eps,
                             o.weight_decay,
                             o.decoupled_weight_decay,
                             1 - std::pow(o.beta1, t),
                             std::sqrt(1 - std::pow(o.beta2, t))};
  if (param.numel() > 0) kernels::adam_update_stub(param.device(), param, g, m, v, u);
}

}  // namespace ember
