// Elementwise ops: broadcasting, dtype promotion, and dispatch to the unary/binary stubs.
#include <cmath>
#include <limits>

#include "core/autograd_graph.h"
#include "core/dispatch.h"
#include "core/op_utils.h"

namespace ember {
namespace {

using kernels::BinaryFn;
using kernels::OpStub;
using kernels::UnaryFn;

enum class BinaryKind { Arith, TrueDiv, Compare };

// Note [Scalar operands]. A Scalar second operand (x * 2.0, x < 0.5, Tensor::add_(1))
// reaches the stub as a 0-d tensor on the host, expanded to the output's shape, whatever
// the device of the other operand: a CUDA backend reads its value there and passes it to
// the kernel by value, as PyTorch does with its wrapped numbers. On a device it would
// otherwise cost an allocation and a fill kernel before every such op, and a captured
// CUDA graph would replay that fill each time. (The left-hand forms 2 - x and 1 / x still
// make the scalar a tensor on the device.)

// Broadcasts a and b, converts both to `common`, and runs the stub into a new tensor. b is
// on a's device, or a host scalar (Note [Scalar operands]).
Tensor broadcast_binary(const OpStub<BinaryFn>& stub, const Tensor& a, const Tensor& b, DType common, BinaryKind kind) {
  const char* op = stub.name();
  if (kind == BinaryKind::TrueDiv && !is_floating(common)) common = kFloat32;
  EMBER_CHECK(kind == BinaryKind::Compare || common != kBool, op,
              ": bool tensors are not supported; convert them with to(kInt64) first");
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = empty(shape, {kind == BinaryKind::Compare ? kBool : common, a.device()});
  if (out.numel() > 0) stub(a.device(), out, a.to(common).expand(shape), b.to(common).expand(shape));
  return out;
}

Tensor binary(const OpStub<BinaryFn>& stub, const Tensor& a, const Tensor& b, DType common, BinaryKind kind) {
  EMBER_OP_SITE(stub.name());
  const char* op = stub.name();
  detail::check_defined(op, a, "first operand");
  detail::check_defined(op, b, "second operand");
  detail::check_same_device(op, {&a, &b});
  return broadcast_binary(stub, a, b, common, kind);
}

Tensor binary(const OpStub<BinaryFn>& stub, const Tensor& a, const Tensor& b, BinaryKind kind) {
  return binary(stub, a, b, detail::result_type(a, b), kind);
}

Tensor binary(const OpStub<BinaryFn>& stub, const Tensor& a, Scalar b, BinaryKind kind) {
  EMBER_OP_SITE(stub.name());
  detail::check_defined(stub.name(), a);
  DType common = detail::result_type(a, b);
  return broadcast_binary(stub, a, scalar_tensor(b, {common, Device::cpu()}), common, kind);
}

// Float math on integer or bool inputs computes in float32, as in PyTorch.
Tensor unary_float(const OpStub<UnaryFn>& stub, const Tensor& x) {
  EMBER_OP_SITE(stub.name());
  detail::check_defined(stub.name(), x);
  Tensor in = is_floating(x.dtype()) ? x : x.to(kFloat32);
  Tensor out = empty_like(in);
  if (out.numel() > 0) stub(in.device(), out, in);
  return out;
}

// A float unary op with one parameter (leaky_relu, elu); integer inputs compute in float32.
Tensor unary_float(const OpStub<kernels::ScalarUnaryFn>& stub, const Tensor& x, double alpha) {
  EMBER_OP_SITE(stub.name());
  detail::check_defined(stub.name(), x);
  Tensor in = is_floating(x.dtype()) ? x : x.to(kFloat32);
  Tensor out = empty_like(in);
  if (out.numel() > 0) stub(in.device(), out, in, alpha);
  return out;
}

// Sign and max ops keep integer dtypes.
Tensor unary_numeric(const OpStub<UnaryFn>& stub, const Tensor& x) {
  EMBER_OP_SITE(stub.name());
  detail::check_defined(stub.name(), x);
  EMBER_CHECK(x.dtype() != kBool, stub.name(), ": bool tensors are not supported");
  Tensor out = empty_like(x);
  if (out.numel() > 0) stub(x.device(), out, x);
  return out;
}

// maximum/minimum backward: the winner gets g, a tie gives each side g / 2.
std::vector<Tensor> tie_split(const Tensor& g, const Tensor& a, const Tensor& b, bool is_max) {
  Tensor a_wins = is_max ? gt(a, b) : lt(a, b), b_wins = is_max ? gt(b, a) : lt(b, a);
  Tensor z = zeros_like(g), half = mul(g, Scalar(0.5));
  Tensor tie = eq(a, b);
  return {where(a_wins, g, where(tie, half, z)), where(b_wins, g, where(tie, half, z))};
}

// a == 0 and b >= 0, where pow's gradient in b is taken as 0.
Tensor logical_and_zero_base(const Tensor& a, const Tensor& b) {
  return where(eq(a, Scalar(0)), ge(b, Scalar(0)), scalar_tensor(false, {kBool, a.device()}));
}

}  // namespace

// Backward formulas capture their inputs as they came and their output as a SavedOutput
// (Note [Double backward] in core/autograd_graph.h), so each is differentiable again.
using autograd::record;
using autograd::SavedOutput;
using Grads = std::vector<Tensor>;

// The ReLU's fused backward kernel, recorded as an op of its own: linear in the gradient,
// with the same mask, and of derivative zero (almost everywhere) in the output.
Tensor detail::relu_backward(const Tensor& grad, const Tensor& out) {
  return record("relu_backward", {grad, out}, binary(kernels::relu_backward_stub, grad, out, BinaryKind::Arith),
                [o = out.detach()](const Tensor& g) { return Grads{detail::relu_backward(g, o), Tensor()}; });
}

Tensor add(const Tensor& a, const Tensor& b) {
  return record("add", {a, b}, binary(kernels::add_stub, a, b, BinaryKind::Arith), [](const Tensor& g) { return Grads{g, g}; });
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return record("sub", {a, b}, binary(kernels::sub_stub, a, b, BinaryKind::Arith),
                [](const Tensor& g) { return Grads{g, neg(g)}; });
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return record("mul", {a, b}, binary(kernels::mul_stub, a, b, BinaryKind::Arith),
                [a, b](const Tensor& g) { return Grads{mul(g, b), mul(g, a)}; });
}
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary(kernels::div_stub, a, b, BinaryKind::TrueDiv);
  return record("div", {a, b}, out, [b, o = SavedOutput(out)](const Tensor& g) {
    Tensor ga = div(g, b);
    return Grads{ga, autograd::needs_input_grad(1) ? neg(mul(ga, o.get())) : Tensor()};  // d(a/b)/db = -(a/b)/b
  });
}
// d/da a^b = b a^(b-1); d/db a^b = a^b log a, taken as 0 where a = 0 and b >= 0 (PyTorch).
Tensor pow(const Tensor& a, const Tensor& b) {
  Tensor out = binary(kernels::pow_stub, a, b, BinaryKind::Arith);
  return record("pow", {a, b}, out, [a, b, o = SavedOutput(out)](const Tensor& g) {
    Tensor ga = mul(g, mul(b, pow(a, sub(b, Scalar(1)))));
    ga = where(eq(b, Scalar(0)), zeros_like(ga), ga);  // 0 * 0^-1 would be NaN; PyTorch gives 0
    if (!autograd::needs_input_grad(1)) return Grads{ga, Tensor()};
    Tensor gb = mul(g, mul(o.get(), log(a)));
    gb = where(logical_and_zero_base(a, b), zeros_like(gb), gb);
    return Grads{ga, gb};
  });
}
// Ties send half the gradient to each side (PyTorch).
Tensor maximum(const Tensor& a, const Tensor& b) {
  return record("maximum", {a, b}, binary(kernels::maximum_stub, a, b, BinaryKind::Arith),
                [a = a.detach(), b = b.detach()](const Tensor& g) { return tie_split(g, a, b, true); });
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return record("minimum", {a, b}, binary(kernels::minimum_stub, a, b, BinaryKind::Arith),
                [a = a.detach(), b = b.detach()](const Tensor& g) { return tie_split(g, a, b, false); });
}
Tensor add(const Tensor& a, Scalar b) {
  return record("add", {a}, binary(kernels::add_stub, a, b, BinaryKind::Arith), [](const Tensor& g) { return Grads{g}; });
}
Tensor sub(const Tensor& a, Scalar b) {
  return record("sub", {a}, binary(kernels::sub_stub, a, b, BinaryKind::Arith), [](const Tensor& g) { return Grads{g}; });
}
Tensor mul(const Tensor& a, Scalar b) {
  return record("mul", {a}, binary(kernels::mul_stub, a, b, BinaryKind::Arith),
                [b](const Tensor& g) { return Grads{mul(g, b)}; });
}
Tensor div(const Tensor& a, Scalar b) {
  return record("div", {a}, binary(kernels::div_stub, a, b, BinaryKind::TrueDiv),
                [b](const Tensor& g) { return Grads{div(g, b)}; });
}
Tensor pow(const Tensor& a, Scalar b) {
  return record("pow", {a}, binary(kernels::pow_stub, a, b, BinaryKind::Arith), [a, b](const Tensor& g) {
    if (b.to_double() == 0) return Grads{zeros_like(g)};  // d/da a^0 = 0, also at a = 0
    return Grads{mul(g, mul(pow(a, Scalar(b.to_double() - 1)), b))};
  });
}

Tensor eq(const Tensor& a, const Tensor& b) { return binary(kernels::eq_stub, a, b, BinaryKind::Compare); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary(kernels::ne_stub, a, b, BinaryKind::Compare); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary(kernels::lt_stub, a, b, BinaryKind::Compare); }
Tensor le(const Tensor& a, const Tensor& b) { return binary(kernels::le_stub, a, b, BinaryKind::Compare); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary(kernels::gt_stub, a, b, BinaryKind::Compare); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary(kernels::ge_stub, a, b, BinaryKind::Compare); }
Tensor eq(const Tensor& a, Scalar b) { return binary(kernels::eq_stub, a, b, BinaryKind::Compare); }
Tensor ne(const Tensor& a, Scalar b) { return binary(kernels::ne_stub, a, b, BinaryKind::Compare); }
Tensor lt(const Tensor& a, Scalar b) { return binary(kernels::lt_stub, a, b, BinaryKind::Compare); }
Tensor le(const Tensor& a, Scalar b) { return binary(kernels::le_stub, a, b, BinaryKind::Compare); }
Tensor gt(const Tensor& a, Scalar b) { return binary(kernels::gt_stub, a, b, BinaryKind::Compare); }
Tensor ge(const Tensor& a, Scalar b) { return binary(kernels::ge_stub, a, b, BinaryKind::Compare); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
Tensor operator+(Scalar a, const Tensor& b) { return add(b, a); }
Tensor operator*(Scalar a, const Tensor& b) { return mul(b, a); }
Tensor operator-(Scalar a, const Tensor& b) {
  detail::check_defined("sub", b);
  DType common = detail::result_type(b, a);
  Tensor out = binary(kernels::sub_stub, scalar_tensor(a, {common, b.device()}), b, common, BinaryKind::Arith);
  return record("sub", {b}, out, [](const Tensor& g) { return Grads{neg(g)}; });
}
Tensor operator/(Scalar a, const Tensor& b) {
  detail::check_defined("div", b);
  DType common = detail::result_type(b, a);
  Tensor out = binary(kernels::div_stub, scalar_tensor(a, {common, b.device()}), b, common, BinaryKind::TrueDiv);
  return record("div", {b}, out, [b, o = SavedOutput(out)](const Tensor& g) {
    return Grads{neg(div(mul(g, o.get()), b))};
  });
}
Tensor operator-(const Tensor& x) { return neg(x); }

Tensor neg(const Tensor& x) {
  return record("neg", {x}, unary_numeric(kernels::neg_stub, x), [](const Tensor& g) { return Grads{neg(g)}; });
}
Tensor abs(const Tensor& x) {
  return record("abs", {x}, unary_numeric(kernels::abs_stub, x), [x = x.detach()](const Tensor& g) {
    Tensor z = zeros_like(g);
    return Grads{where(gt(x, Scalar(0)), g, where(lt(x, Scalar(0)), neg(g), z))};  // abs'(0) = 0
  });
}
Tensor relu(const Tensor& x) {
  Tensor out = unary_numeric(kernels::relu_stub, x);
  return record("relu", {x}, out, [o = out.detach()](const Tensor& g) { return Grads{detail::relu_backward(g, o)}; });
}
Tensor exp(const Tensor& x) {
  Tensor out = unary_float(kernels::exp_stub, x);
  return record("exp", {x}, out, [o = SavedOutput(out)](const Tensor& g) { return Grads{mul(g, o.get())}; });
}
Tensor log(const Tensor& x) {
  return record("log", {x}, unary_float(kernels::log_stub, x), [x](const Tensor& g) { return Grads{div(g, x)}; });
}
Tensor sqrt(const Tensor& x) {
  Tensor out = unary_float(kernels::sqrt_stub, x);
  return record("sqrt", {x}, out, [o = SavedOutput(out)](const Tensor& g) {
    return Grads{div(g, mul(o.get(), Scalar(2)))};
  });
}
Tensor rsqrt(const Tensor& x) {
  Tensor out = unary_float(kernels::rsqrt_stub, x);
  return record("rsqrt", {x}, out, [o = SavedOutput(out)](const Tensor& g) {
    return Grads{mul(g, mul(pow(o.get(), Scalar(3)), Scalar(-0.5)))};
  });
}
// Exact: Phi(x) + x phi(x). Tanh form: differentiate 0.5 x (1 + tanh(u)), u = c (x + k x^3).
Tensor gelu(const Tensor& x, bool approximate) {
  Tensor out = unary_float(approximate ? kernels::gelu_tanh_stub : kernels::gelu_stub, x);
  return record("gelu", {x}, out, [x, approximate](const Tensor& g) {
    Tensor xf = is_floating(x.dtype()) ? x : x.to(kFloat32);
    if (!approximate) {
      Tensor phi = mul(exp(mul(mul(xf, xf), Scalar(-0.5))), Scalar(0.39894228040143267794));
      Tensor Phi = mul(add(erf(mul(xf, Scalar(0.70710678118654752440))), Scalar(1)), Scalar(0.5));
      return Grads{mul(g, add(Phi, mul(xf, phi)))};
    }
    const double c = 0.79788456080286535588, k = 0.044715;
    Tensor x2 = mul(xf, xf);
    Tensor t = tanh(mul(add(xf, mul(mul(x2, xf), Scalar(k))), Scalar(c)));
    Tensor du = mul(add(mul(x2, Scalar(3 * k)), Scalar(1)), Scalar(c));
    Tensor one_minus_t2 = operator-(Scalar(1), mul(t, t));
    Tensor d = add(mul(add(t, Scalar(1)), Scalar(0.5)), mul(mul(mul(xf, Scalar(0.5)), one_minus_t2), du));
    return Grads{mul(g, d)};
  });
}
Tensor erf(const Tensor& x) {
  return record("erf", {x}, unary_float(kernels::erf_stub, x), [x](const Tensor& g) {
    return Grads{mul(g, mul(exp(neg(mul(x, x))), Scalar(1.12837916709551257390)))};  // 2/sqrt(pi) e^(-x^2)
  });
}
Tensor tanh(const Tensor& x) {
  Tensor out = unary_float(kernels::tanh_stub, x);
  return record("tanh", {x}, out, [o = SavedOutput(out)](const Tensor& g) {
    const Tensor y = o.get();
    return Grads{mul(g, operator-(Scalar(1), mul(y, y)))};
  });
}
Tensor sigmoid(const Tensor& x) {
  Tensor out = unary_float(kernels::sigmoid_stub, x);
  return record("sigmoid", {x}, out, [o = SavedOutput(out)](const Tensor& g) {
    const Tensor y = o.get();
    return Grads{mul(g, mul(y, operator-(Scalar(1), y)))};
  });
}
Tensor sin(const Tensor& x) {
  return record("sin", {x}, unary_float(kernels::sin_stub, x), [x](const Tensor& g) { return Grads{mul(g, cos(x))}; });
}
Tensor cos(const Tensor& x) {
  return record("cos", {x}, unary_float(kernels::cos_stub, x), [x](const Tensor& g) {
    return Grads{neg(mul(g, sin(x)))};
  });
}
// silu'(x) = s (1 + x (1 - s)), s = sigmoid(x).
Tensor silu(const Tensor& x) {
  return record("silu", {x}, unary_float(kernels::silu_stub, x), [x](const Tensor& g) {
    Tensor s = sigmoid(x);
    return Grads{mul(g, mul(s, add(mul(x, operator-(Scalar(1), s)), Scalar(1))))};
  });
}
Tensor leaky_relu(const Tensor& x, double negative_slope) {
  return record("leaky_relu", {x}, unary_float(kernels::leaky_relu_stub, x, negative_slope),
                [x = x.detach(), negative_slope](const Tensor& g) {
                  return Grads{where(gt(x, Scalar(0)), g, mul(g, Scalar(negative_slope)))};
                });
}
// elu'(x) = alpha e^x for x <= 0; the exponent is clamped at 0 so that the branch where()
// discards stays finite (an inf there would make the second derivative 0 * inf).
Tensor elu(const Tensor& x, double alpha) {
  return record("elu", {x}, unary_float(kernels::elu_stub, x, alpha), [x, alpha](const Tensor& g) {
    Tensor e = exp(clamp(x, std::nullopt, 0.0));
    return Grads{where(gt(x.detach(), Scalar(0)), g, mul(g, mul(e, Scalar(alpha))))};
  });
}

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  EMBER_OP_SITE("clamp");
  detail::check_defined("clamp", x);
  EMBER_CHECK(min || max, "clamp: at least one of min and max must be given");
  EMBER_CHECK(x.dtype() != kBool, "clamp: bool tensors are not supported");
  auto fractional = [](std::optional<double> v) { return v && *v != std::floor(*v); };
  Tensor in = !is_floating(x.dtype()) && (fractional(min) || fractional(max)) ? x.to(kFloat32) : x;
  Tensor out = empty_like(in);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const double lo = min.value_or(-kInf), hi = max.value_or(kInf);
  if (out.numel() > 0) kernels::clamp_stub(in.device(), out, in, lo, hi);
  // The gradient passes where lo <= x <= hi (bounds included, as in PyTorch).
  return record("clamp", {x}, out, [x = x.detach(), lo, hi](const Tensor& g) {
    Tensor inside = where(ge(x, Scalar(lo)), le(x, Scalar(hi)), scalar_tensor(false, {kBool, x.device()}));
    return Grads{where(inside, g, zeros_like(g))};
  });
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  EMBER_OP_SITE("where");
  detail::check_defined("where", cond, "cond");
  detail::check_defined("where", a);
  detail::check_defined("where", b);
  detail::check_same_device("where", {&cond, &a, &b});
  EMBER_CHECK(cond.dtype() == kBool, "where: cond must be a bool tensor, got ", dtype_name(cond.dtype()));
  DType common = detail::result_type(a, b);
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = empty(shape, {common, a.device()});
  if (out.numel() > 0)
    kernels::where_stub(a.device(), out, cond.expand(shape), a.to(common).expand(shape), b.to(common).expand(shape));
  return record("where", {cond, a, b}, out, [c = cond.detach()](const Tensor& g) {
    Tensor z = zeros_like(g);
    return Grads{Tensor(), where(c, g, z), where(c, z, g)};
  });
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  if (a.shape() != b.shape()) return false;
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) {
      if (!(equal_nan && std::isnan(x[i]) && std::isnan(y[i]))) return false;
      continue;
    }
    if (x[i] == y[i]) continue;  // equal infinities
    if (!(std::fabs(x[i] - y[i]) <= atol + rtol * std::fabs(y[i]))) return false;
  }
  return true;
}

}  // namespace ember
