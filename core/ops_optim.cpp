// Fused optimizer updates: argument checks, then one in-place kernel per parameter, or one
// multi-tensor kernel per list, whose math is the shared functor of
// kernels/common/optim_ops.h.
#include <cmath>
#include <map>

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

kernels::ops::AdamUpdate adam_update(const AdamStepOptions& o) {
  const double t = static_cast<double>(o.step);
  return {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.decoupled_weight_decay, 1 - std::pow(o.beta1, t),
          std::sqrt(1 - std::pow(o.beta2, t))};
}

// Calls f(device, indices) for the indices of `params` on each device, in order.
template <class F>
void per_device(const std::vector<Tensor>& params, F&& f) {
  std::map<std::pair<int, int>, std::vector<size_t>> groups;
  for (size_t i = 0; i < params.size(); ++i)
    groups[{static_cast<int>(params[i].device().type), params[i].device().index}].push_back(i);
  for (const auto& [key, idx] : groups) f(params[idx[0]].device(), idx);
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
  if (param.numel() > 0) kernels::adam_update_stub(param.device(), param, g, m, v, adam_update(o));
}

void sgd_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& bufs,
               const SgdStepOptions& o, bool first_step) {
  EMBER_OP_SITE("sgd_step");
  EMBER_CHECK(grads.size() == params.size() && bufs.size() == params.size(), "sgd_step_: ", params.size(),
              " parameters with ", grads.size(), " gradients and ", bufs.size(), " momentum buffers");
  std::vector<Tensor> g(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    detail::check_defined("sgd_step_", params[i], "param");
    EMBER_CHECK(params[i].is_contiguous(), "sgd_step_: param ", i, " must be contiguous");
    g[i] = grads[i].detach().to(params[i].dtype()).contiguous();
    check_state("sgd_step_", params[i], g[i], "grad");
    if (o.momentum != 0) check_state("sgd_step_", params[i], bufs[i], "momentum_buffer");
  }
  const kernels::ops::SgdUpdate u{o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, first_step};
  per_device(params, [&](Device d, const std::vector<size_t>& idx) {
    std::vector<Tensor> p, gg, b;
    for (size_t i : idx) {
      p.push_back(params[i]);
      gg.push_back(g[i]);
      b.push_back(o.momentum != 0 ? bufs[i] : Tensor());
    }
    kernels::multi_sgd_update_stub(d, p, gg, b, u);
  });
}

void adam_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& m,
                const std::vector<Tensor>& v, const AdamStepOptions& o) {
  EMBER_OP_SITE("adam_step");
  EMBER_CHECK(grads.size() == params.size() && m.size() == params.size() && v.size() == params.size(), "adam_step_: ",
              params.size(), " parameters with ", grads.size(), " gradients and ", m.size(), " / ", v.size(),
              " moment buffers");
  EMBER_CHECK(o.step >= 1, "adam_step_: step is 1-based, got ", o.step);
  std::vector<Tensor> g(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    detail::check_defined("adam_step_", params[i], "param");
    EMBER_CHECK(params[i].is_contiguous(), "adam_step_: param ", i, " must be contiguous");
    g[i] = grads[i].detach().to(params[i].dtype()).contiguous();
    check_state("adam_step_", params[i], g[i], "grad");
    check_state("adam_step_", params[i], m[i], "exp_avg");
    check_state("adam_step_", params[i], v[i], "exp_avg_sq");
  }
  const kernels::ops::AdamUpdate u = adam_update(o);
  per_device(params, [&](Device d, const std::vector<size_t>& idx) {
    std::vector<Tensor> p, gg, mm, vv;
    for (size_t i : idx) {
      p.push_back(params[i]);
      gg.push_back(g[i]);
      mm.push_back(m[i]);
      vv.push_back(v[i]);
    }
    kernels::multi_adam_update_stub(d, p, gg, mm, vv, u);
  });
}

}  // namespace ember
