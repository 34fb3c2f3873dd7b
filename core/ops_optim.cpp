// Fused optimizer updates: argument checks, then one in-place kernel per parameter, or one
// multi-tensor kernel per list, whose math is the shared functor of
// kernels/common/optim_ops.h.
#include <cmath>
#include <array>
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
  const kernels::ops::AdamUpdate u{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.decoupled_weight_decay, 0, 0};
  return u.at(static_cast<double>(o.step), o.lr);
}

// A capturable step's lr or step: a float64 scalar on the parameters' device.
void check_scalar_state(const char* op, const std::vector<Tensor>& params, const Tensor& t, const char* what) {
  EMBER_CHECK(t.defined() && t.numel() == 1 && t.dtype() == kFloat64, op, ": ", what,
              " must be a float64 tensor of one element");
  for (size_t i = 0; i < params.size(); ++i)
    EMBER_CHECK(params[i].device() == t.device(), op, ": param ", i, " is on ", params[i].device().str(), " but ",
                what, " on ", t.device().str(), " (a capturable step takes the parameters of one device)");
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

namespace {

// The gradients of a list step, checked with its state, as the kernels take them.
std::vector<Tensor> sgd_list_grads(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                                   const std::vector<Tensor>& bufs, const SgdStepOptions& o) {
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
  return g;
}

std::vector<Tensor> adam_list_grads(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                                    const std::vector<Tensor>& m, const std::vector<Tensor>& v) {
  EMBER_CHECK(grads.size() == params.size() && m.size() == params.size() && v.size() == params.size(), "adam_step_: ",
              params.size(), " parameters with ", grads.size(), " gradients and ", m.size(), " / ", v.size(),
              " moment buffers");
  std::vector<Tensor> g(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    detail::check_defined("adam_step_", params[i], "param");
    EMBER_CHECK(params[i].is_contiguous(), "adam_step_: param ", i, " must be contiguous");
    g[i] = grads[i].detach().to(params[i].dtype()).contiguous();
    check_state("adam_step_", params[i], g[i], "grad");
    check_state("adam_step_", params[i], m[i], "exp_avg");
    check_state("adam_step_", params[i], v[i], "exp_avg_sq");
  }
  return g;
}

// The tensors of `lists` at `idx`, one list each (a device's share of a list step).
template <size_t N>
std::array<std::vector<Tensor>, N> pick(const std::array<const std::vector<Tensor>*, N>& lists,
                                        const std::vector<size_t>& idx) {
  std::array<std::vector<Tensor>, N> out;
  for (size_t k = 0; k < N; ++k)
    for (size_t i : idx) out[k].push_back((*lists[k])[i]);
  return out;
}

}  // namespace

void sgd_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& bufs,
               const SgdStepOptions& o, bool first_step) {
  EMBER_OP_SITE("sgd_step");
  const std::vector<Tensor> g = sgd_list_grads(params, grads, bufs, o);
  const std::vector<Tensor> b = o.momentum != 0 ? bufs : std::vector<Tensor>(params.size());
  const kernels::ops::SgdUpdate u{o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, first_step};
  per_device(params, [&](Device d, const std::vector<size_t>& idx) {
    const auto [p, gg, bb] = pick<3>({&params, &g, &b}, idx);
    kernels::multi_sgd_update_stub(d, p, gg, bb, u);
  });
}

void adam_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& m,
                const std::vector<Tensor>& v, const AdamStepOptions& o) {
  EMBER_OP_SITE("adam_step");
  EMBER_CHECK(o.step >= 1, "adam_step_: step is 1-based, got ", o.step);
  const std::vector<Tensor> g = adam_list_grads(params, grads, m, v);
  const kernels::ops::AdamUpdate u = adam_update(o);
  per_device(params, [&](Device d, const std::vector<size_t>& idx) {
    const auto [p, gg, mm, vv] = pick<4>({&params, &g, &m, &v}, idx);
    kernels::multi_adam_update_stub(d, p, gg, mm, vv, u);
  });
}

void sgd_step_capturable_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                          const std::vector<Tensor>& bufs, const SgdStepOptions& o, bool first_step,
                          const Tensor& lr) {
  EMBER_OP_SITE("sgd_step");
  const std::vector<Tensor> g = sgd_list_grads(params, grads, bufs, o);
  check_scalar_state("sgd_step_capturable_", params, lr, "lr");
  if (params.empty()) return;
  const std::vector<Tensor> b = o.momentum != 0 ? bufs : std::vector<Tensor>(params.size());
  const kernels::ops::SgdUpdate u{o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, first_step};
  kernels::multi_sgd_update_capturable_stub(lr.device(), params, g, b, u, lr);
}

void adam_step_capturable_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                           const std::vector<Tensor>& m, const std::vector<Tensor>& v, const AdamStepOptions& o,
                           const Tensor& lr, const Tensor& step) {
  EMBER_OP_SITE("adam_step");
  const std::vector<Tensor> g = adam_list_grads(params, grads, m, v);
  check_scalar_state("adam_step_capturable_", params, lr, "lr");
  check_scalar_state("adam_step_capturable_", params, step, "step");
  if (params.empty()) return;
  const kernels::ops::AdamUpdate u = adam_update(o);
  kernels::multi_adam_update_capturable_stub(lr.device(), params, g, m, v, u, lr, step);
}

}  // namespace ember
