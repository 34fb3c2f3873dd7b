// Losses with PyTorch's numerics, composed from core's ops (so every backend has them):
// binary cross entropy (on probabilities, and on logits with pos_weight), L1, smooth L1,
// Huber and KL divergence. Where the composition's chain rule would be wrong at an edge
// (log clamped at -100; softplus's kinks at x = 0 in the stable form), the forward runs
// without recording and the op records PyTorch's gradient, written with differentiable
// ops so that it differentiates again.
#include <cmath>
#include <optional>

#include "core/autograd.h"
#include "core/autograd_graph.h"
#include "core/op_utils.h"
#include "core/ops.h"

namespace ember {
namespace {

using Grads = std::vector<Tensor>;

void check_pair(const char* op, const Tensor& input, const Tensor& target) {
  detail::check_defined(op, input, "input");
  detail::check_defined(op, target, "target");
  detail::check_same_device(op, {&input, &target});
  EMBER_CHECK(is_floating(input.dtype()), op, ": input must be floating, got ", dtype_name(input.dtype()));
  EMBER_CHECK(is_floating(target.dtype()), op, ": target must be floating, got ", dtype_name(target.dtype()));
  EMBER_CHECK(input.shape() == target.shape(), op, ": input ", shape_str(input.shape()), " and target ",
              shape_str(target.shape()), " differ in shape");
}

// A weight that broadcasts to the input's shape (undefined: none).
void check_weight(const char* op, const Tensor& w, const Tensor& input, const char* what) {
  if (!w.defined()) return;
  detail::check_same_device(op, {&input, &w});
  EMBER_CHECK(is_floating(w.dtype()), op, ": ", what, " must be floating, got ", dtype_name(w.dtype()));
  EMBER_CHECK(broadcast_shapes(w.shape(), input.shape(), op) == input.shape(), op, ": ", what, " ",
              shape_str(w.shape()), " does not broadcast to the input's shape ", shape_str(input.shape()));
}

Tensor reduce(const char* op, const Tensor& loss, Reduction r) {
  switch (r) {
    case Reduction::None: return loss;
    case Reduction::Mean: return mean(loss);
    case Reduction::Sum: return sum(loss);
    case Reduction::BatchMean: break;
  }
  EMBER_FAIL(op, ": reduction batchmean is kl_div's only; use none, mean or sum");
}

}  // namespace

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction) {
  EMBER_OP_SITE("binary_cross_entropy");
  const char* op = "binary_cross_entropy";
  check_pair(op, input, target);
  check_weight(op, weight, input, "weight");
  EMBER_CHECK(reduction != Reduction::BatchMean, op, ": reduction batchmean is kl_div's only");
  if (input.device().is_cpu() && input.numel() > 0) {  // a device would pay a synchronization for it
    NoGradGuard no_grad;
    const Tensor no = scalar_tensor(false, {kBool, input.device()});  // not the default device's
    EMBER_CHECK(all(where(ge(input, Scalar(0)), le(input, Scalar(1)), no)).item<bool>(), op,
                ": every element of input must lie in [0, 1] (probabilities; for logits use "
                "binary_cross_entropy_with_logits)");
  }
  // Each log clamped at -100, as PyTorch's kernel.
  auto logs = [](const Tensor& x) {
    return std::pair{clamp(log(x), -100.0, std::nullopt), clamp(log(operator-(Scalar(1), x)), -100.0, std::nullopt)};
  };
  auto unweighted = [logs](const Tensor& x, const Tensor& t) {
    auto [log_x, log_1mx] = logs(x);
    return sub(mul(sub(t, Scalar(1)), log_1mx), mul(t, log_x));
  };
  Tensor loss;
  {
    NoGradGuard no_grad;
    loss = unweighted(input, target);
    if (weight.defined()) loss = mul(loss, weight);
  }
  // PyTorch's gradient (x - t) / max(x (1 - x), 1e-12), finite at x = 0 and 1; the
  // target's log(1 - x) - log(x) and the weight's the unweighted loss, with the clamps.
  auto formula = [=](const Tensor& g) {
    Tensor gw = weight.defined() ? mul(g, weight) : g;
    Tensor denom = clamp(mul(input, operator-(Scalar(1), input)), 1e-12, std::nullopt);
    Grads r{div(mul(gw, sub(input, target)), denom), Tensor()};
    if (autograd::needs_input_grad(1)) {
      auto [log_x, log_1mx] = logs(input);
      r[1] = mul(gw, sub(log_1mx, log_x));
    }
    if (weight.defined()) r.push_back(mul(g, unweighted(input, target)));
    return r;
  };
  std::vector<Tensor> inputs{input, target};
  if (weight.defined()) inputs.push_back(weight);
  return reduce(op, autograd::record(op, inputs, loss, formula), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight,
                                        const Tensor& pos_weight, Reduction reduction) {
  EMBER_OP_SITE("binary_cross_entropy_with_logits");
  const char* op = "binary_cross_entropy_with_logits";
  check_pair(op, input, target);
  check_weight(op, weight, input, "weight");
  check_weight(op, pos_weight, input, "pos_weight");
  EMBER_CHECK(reduction != Reduction::BatchMean, op, ": reduction batchmean is kl_div's only");
  // softplus(-x) as PyTorch 1.13 writes it: m + log(e^-m + e^(-x-m)), m = max(-x, 0).
  auto softplus_neg = [](const Tensor& x) {
    Tensor m = clamp(neg(x), 0.0, std::nullopt);
    return add(m, log(add(exp(neg(m)), exp(sub(neg(x), m)))));
  };
  // lw = 1 + (pos_weight - 1) t, the weight of the positive term.
  auto log_weight = [pos_weight](const Tensor& t) {
    return pos_weight.defined() ? add(mul(sub(pos_weight, Scalar(1)), t), Scalar(1)) : Tensor();
  };
  Tensor loss;
  {
    NoGradGuard no_grad;
    Tensor sp = softplus_neg(input), lw = log_weight(target);
    loss = add(mul(operator-(Scalar(1), target), input), lw.defined() ? mul(lw, sp) : sp);
    if (weight.defined()) loss = mul(loss, weight);
  }
  // d/dx = lw sigmoid(x) - pw t (PyTorch's form; finite where the sigmoid saturates);
  // d/dt = -x + (pw - 1) softplus(-x); d/dpw = t softplus(-x).
  auto formula = [=](const Tensor& g) {
    Tensor gw = weight.defined() ? mul(g, weight) : g;
    Tensor s = sigmoid(input), lw = log_weight(target);
    Tensor gx = pos_weight.defined() ? sub(mul(lw, s), mul(pos_weight, target)) : sub(s, target);
    Grads r{mul(gw, gx), Tensor()};
    if (autograd::needs_input_grad(1)) {
      Tensor gt = pos_weight.defined() ? sub(mul(sub(pos_weight, Scalar(1)), softplus_neg(input)), input) : neg(input);
      r[1] = mul(gw, gt);
    }
    Tensor sp = (weight.defined() || pos_weight.defined()) ? softplus_neg(input) : Tensor();
    if (weight.defined()) {
      Tensor l = add(mul(operator-(Scalar(1), target), input), lw.defined() ? mul(lw, sp) : sp);
      r.push_back(mul(g, l));
    }
    if (pos_weight.defined()) r.push_back(mul(gw, mul(target, sp)));
    return r;
  };
  std::vector<Tensor> inputs{input, target};
  if (weight.defined()) inputs.push_back(weight);
  if (pos_weight.defined()) inputs.push_back(pos_weight);
  return reduce(op, autograd::record(op, inputs, loss, formula), reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  EMBER_OP_SITE("l1_loss");
  check_pair("l1_loss", input, target);
  return reduce("l1_loss", abs(sub(input, target)), reduction);
}

// Both branches are finite wherever where() discards them, so the composition's gradient
// (d / beta, or sign(d)) is PyTorch's and differentiates again.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  EMBER_OP_SITE("smooth_l1_loss");
  check_pair("smooth_l1_loss", input, target);
  EMBER_CHECK(beta >= 0, "smooth_l1_loss: beta must be >= 0, got ", beta);
  if (beta == 0) return reduce("smooth_l1_loss", abs(sub(input, target)), reduction);
  Tensor d = sub(input, target), ad = abs(d);
  Tensor l = where(lt(ad, Scalar(beta)), mul(mul(d, d), Scalar(0.5 / beta)), sub(ad, Scalar(0.5 * beta)));
  return reduce("smooth_l1_loss", l, reduction);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  EMBER_OP_SITE("huber_loss");
  check_pair("huber_loss", input, target);
  EMBER_CHECK(delta > 0, "huber_loss: delta must be positive, got ", delta);
  Tensor d = sub(input, target), ad = abs(d);
  Tensor l = where(lt(ad, Scalar(delta)), mul(mul(d, d), Scalar(0.5)), mul(sub(ad, Scalar(0.5 * delta)), Scalar(delta)));
  return reduce("huber_loss", l, reduction);
}

// t log t is PyTorch's xlogy(t, t): 0 where t = 0 (log taken of 1 there, so that no
// inf reaches a product in the gradient).
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction, bool log_target) {
  EMBER_OP_SITE("kl_div");
  check_pair("kl_div", input, target);
  Tensor l;
  if (log_target) {
    l = mul(exp(target), sub(target, input));
  } else {
    Tensor safe = where(eq(target, Scalar(0)), full({}, 1, {target.dtype(), target.device()}), target);
    l = sub(mul(target, log(safe)), mul(target, input));
  }
  if (reduction != Reduction::BatchMean) return reduce("kl_div", l, reduction);
  return input.dim() == 0 ? sum(l) : div(sum(l), Scalar(static_cast<double>(input.size(0))));
}

}  // namespace ember
