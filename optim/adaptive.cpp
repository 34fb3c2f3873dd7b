// Adadelta, RMSprop, Adagrad (optim/adaptive.h): PyTorch 1.13's single-tensor updates, op
// for op in the same order (addcmul as (value * t1) * t2, addcdiv as (value * t1) / t2), so
// float64 runs agree with PyTorch's to a few ulps.
#include "optim/adaptive.h"

#include <cmath>

#include "base/error.h"
#include "core/autograd.h"

namespace ember::optim {
namespace {

// The gradient as the update uses it: in the parameter's dtype, plus weight_decay * p.
Tensor decayed_grad(const Tensor& p, const Tensor& grad, double weight_decay) {
  Tensor g = grad.detach().to(p.dtype());
  return weight_decay != 0 ? add(g, mul(p.detach(), Scalar(weight_decay))) : g;
}

// a * s + (v * t1) * t2: PyTorch's a.mul_(s).addcmul_(t1, t2, value=v).
Tensor scale_addcmul(const Tensor& a, double s, const Tensor& t1, const Tensor& t2, double v) {
  return add(mul(a, Scalar(s)), mul(mul(t1, Scalar(v)), t2));
}

void check_common(const std::string& op, const Optimizer::Options& o) {
  EMBER_CHECK(o.at("eps") >= 0 && std::isfinite(o.at("eps")), op, ": eps must be finite and >= 0, got ", o.at("eps"));
  EMBER_CHECK(o.at("weight_decay") >= 0 && std::isfinite(o.at("weight_decay")), op,
              ": weight_decay must be finite and >= 0, got ", o.at("weight_decay"));
}

}  // namespace

Adadelta::Adadelta(std::vector<ParamGroup> groups, Options o)
    : Optimizer("Adadelta", std::move(groups),
                {{"lr", o.lr}, {"rho", o.rho}, {"eps", o.eps}, {"weight_decay", o.weight_decay}}) {
  check_groups();
}

void Adadelta::check_options(const Optimizer::Options& o) const {
  check_common(name(), o);
  EMBER_CHECK(o.at("rho") >= 0 && o.at("rho") <= 1, name(), ": rho must be in [0, 1], got ", o.at("rho"));
}

void Adadelta::update() {
  NoGradGuard no_grad;
  for (const Group& group : groups_) {
    const double lr = group.options.at("lr"), rho = group.options.at("rho"), eps = group.options.at("eps");
    for (size_t i : group.params) {
      const Tensor& p = params_[i];
      if (!p.grad().defined()) continue;
      const Tensor g = decayed_grad(p, p.grad(), group.options.at("weight_decay"));
      const Tensor square_avg = buffer(i, "square_avg"), acc_delta = buffer(i, "acc_delta");
      square_avg.copy_(scale_addcmul(square_avg, rho, g, g, 1 - rho));
      const Tensor std = sqrt(add(square_avg, Scalar(eps)));
      const Tensor delta = mul(div(sqrt(add(acc_delta, Scalar(eps))), std), g);
      acc_delta.copy_(scale_addcmul(acc_delta, rho, delta, delta, 1 - rho));
      p.detach().add_(mul(delta, Scalar(-lr)));
    }
  }
  count_step();
}

RMSprop::RMSprop(std::vector<ParamGroup> groups, Options o)
    : Optimizer("RMSprop", std::move(groups),
                {{"lr", o.lr}, {"alpha", o.alpha}, {"eps", o.eps}, {"weight_decay", o.weight_decay},
                 {"momentum", o.momentum}}),
      centered_(o.centered) {
  check_groups();
}

void RMSprop::check_options(const Optimizer::Options& o) const {
  check_common(name(), o);
  EMBER_CHECK(o.at("alpha") >= 0 && o.at("alpha") <= 1, name(), ": alpha must be in [0, 1], got ", o.at("alpha"));
  EMBER_CHECK(o.at("momentum") >= 0 && std::isfinite(o.at("momentum")), name(), ": momentum must be >= 0, got ",
              o.at("momentum"));
}

void RMSprop::update() {
  NoGradGuard no_grad;
  for (const Group& group : groups_) {
    const double lr = group.options.at("lr"), alpha = group.options.at("alpha"), eps = group.options.at("eps");
    const double momentum = group.options.at("momentum");
    for (size_t i : group.params) {
      const Tensor& p = params_[i];
      if (!p.grad().defined()) continue;
      const Tensor g = decayed_grad(p, p.grad(), group.options.at("weight_decay"));
      const Tensor square_avg = buffer(i, "square_avg");
      square_avg.copy_(scale_addcmul(square_avg, alpha, g, g, 1 - alpha));
      Tensor avg;
      if (centered_) {
        const Tensor grad_avg = buffer(i, "grad_avg");
        grad_avg.copy_(add(mul(grad_avg, Scalar(alpha)), mul(g, Scalar(1 - alpha))));
        avg = sqrt(sub(square_avg, mul(grad_avg, grad_avg)));
      } else {
        avg = sqrt(square_avg);
      }
      avg = add(avg, Scalar(eps));
      if (momentum > 0) {
        const Tensor buf = buffer(i, "momentum_buffer");
        buf.copy_(add(mul(buf, Scalar(momentum)), div(g, avg)));
        p.detach().add_(mul(buf, Scalar(-lr)));
      } else {
        p.detach().add_(div(mul(g, Scalar(-lr)), avg));
      }
    }
  }
  count_step();
}

Adagrad::Adagrad(std::vector<ParamGroup> groups, Options o)
    : Optimizer("Adagrad", std::move(groups),
                {{"lr", o.lr}, {"lr_decay", o.lr_decay}, {"weight_decay", o.weight_decay},
                 {"initial_accumulator_value", o.initial_accumulator_value}, {"eps", o.eps}}) {
  check_groups();
}

void Adagrad::check_options(const Optimizer::Options& o) const {
  check_common(name(), o);
  EMBER_CHECK(o.at("lr_decay") >= 0 && std::isfinite(o.at("lr_decay")), name(), ": lr_decay must be >= 0, got ",
              o.at("lr_decay"));
  EMBER_CHECK(o.at("initial_accumulator_value") >= 0 && std::isfinite(o.at("initial_accumulator_value")), name(),
              ": initial_accumulator_value must be >= 0, got ", o.at("initial_accumulator_value"));
}

void Adagrad::update() {
  NoGradGuard no_grad;
  count_step();
  for (const Group& group : groups_) {
    const double clr = group.options.at("lr") / (1 + static_cast<double>(steps_ - 1) * group.options.at("lr_decay"));
    for (size_t i : group.params) {
      const Tensor& p = params_[i];
      if (!p.grad().defined()) continue;
      const Tensor g = decayed_grad(p, p.grad(), group.options.at("weight_decay"));
      const Tensor state_sum = buffer(i, "sum", group.options.at("initial_accumulator_value"));
      state_sum.copy_(add(state_sum, mul(g, g)));
      const Tensor std = add(sqrt(state_sum), Scalar(group.options.at("eps")));
      p.detach().add_(div(mul(g, Scalar(-clr)), std));
    }
  }
}

}  // namespace ember::optim
