// Elementwise ops: broadcasting, dtype promotion, and dispatch to the unary/binary stubs.
#include <cmath>
#include <limits>

#include "core/op_utils.h"
#include "kernels/stubs.h"

namespace ember {
namespace {

using kernels::BinaryFn;
using kernels::OpStub;
using kernels::UnaryFn;

enum class BinaryKind { Arith, TrueDiv, Compare };

// Broadcasts a and b, converts both to `common`, and runs the stub into a new tensor.
Tensor binary(const OpStub<BinaryFn>& stub, const Tensor& a, const Tensor& b, DType common, BinaryKind kind) {
  const char* op = stub.name();
  detail::check_defined(op, a, "first operand");
  detail::check_defined(op, b, "second operand");
  detail::check_same_device(op, {&a, &b});
  if (kind == BinaryKind::TrueDiv && !is_floating(common)) common = kFloat32;
  EMBER_CHECK(kind == BinaryKind::Compare || common != kBool, op,
              ": bool tensors are not supported; convert them with to(kInt64) first");
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = empty(shape, {kind == BinaryKind::Compare ? kBool : common, a.device()});
  if (out.numel() > 0) stub(a.device(), out, a.to(common).expand(shape), b.to(common).expand(shape));
  return out;
}

Tensor binary(const OpStub<BinaryFn>& stub, const Tensor& a, const Tensor& b, BinaryKind kind) {
  return binary(stub, a, b, detail::result_type(a, b), kind);
}

Tensor binary(const OpStub<BinaryFn>& stub, const Tensor& a, Scalar b, BinaryKind kind) {
  detail::check_defined(stub.name(), a);
  DType common = detail::result_type(a, b);
  return binary(stub, a, scalar_tensor(b, {common, a.device()}), common, kind);
}

// Float math on integer or bool inputs computes in float32, as in PyTorch.
Tensor unary_float(const OpStub<UnaryFn>& stub, const Tensor& x) {
  detail::check_defined(stub.name(), x);
  Tensor in = is_floating(x.dtype()) ? x : x.to(kFloat32);
  Tensor out = empty_like(in);
  if (out.numel() > 0) stub(in.device(), out, in);
  return out;
}

// Sign and max ops keep integer dtypes.
Tensor unary_numeric(const OpStub<UnaryFn>& stub, const Tensor& x) {
  detail::check_defined(stub.name(), x);
  EMBER_CHECK(x.dtype() != kBool, stub.name(), ": bool tensors are not supported");
  Tensor out = empty_like(x);
  if (out.numel() > 0) stub(x.device(), out, x);
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary(kernels::add_stub, a, b, BinaryKind::Arith); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(kernels::sub_stub, a, b, BinaryKind::Arith); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(kernels::mul_stub, a, b, BinaryKind::Arith); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(kernels::div_stub, a, b, BinaryKind::TrueDiv); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary(kernels::pow_stub, a, b, BinaryKind::Arith); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(kernels::maximum_stub, a, b, BinaryKind::Arith); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(kernels::minimum_stub, a, b, BinaryKind::Arith); }
Tensor add(const Tensor& a, Scalar b) { return binary(kernels::add_stub, a, b, BinaryKind::Arith); }
Tensor sub(const Tensor& a, Scalar b) { return binary(kernels::sub_stub, a, b, BinaryKind::Arith); }
Tensor mul(const Tensor& a, Scalar b) { return binary(kernels::mul_stub, a, b, BinaryKind::Arith); }
Tensor div(const Tensor& a, Scalar b) { return binary(kernels::div_stub, a, b, BinaryKind::TrueDiv); }
Tensor pow(const Tensor& a, Scalar b) { return binary(kernels::pow_stub, a, b, BinaryKind::Arith); }

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
  return binary(kernels::sub_stub, scalar_tensor(a, {common, b.device()}), b, common, BinaryKind::Arith);
}
Tensor operator/(Scalar a, const Tensor& b) {
  detail::check_defined("div", b);
  DType common = detail::result_type(b, a);
  return binary(kernels::div_stub, scalar_tensor(a, {common, b.device()}), b, common, BinaryKind::TrueDiv);
}
Tensor operator-(const Tensor& x) { return neg(x); }

Tensor neg(const Tensor& x) { return unary_numeric(kernels::neg_stub, x); }
Tensor abs(const Tensor& x) { return unary_numeric(kernels::abs_stub, x); }
Tensor relu(const Tensor& x) { return unary_numeric(kernels::relu_stub, x); }
Tensor exp(const Tensor& x) { return unary_float(kernels::exp_stub, x); }
Tensor log(const Tensor& x) { return unary_float(kernels::log_stub, x); }
Tensor sqrt(const Tensor& x) { return unary_float(kernels::sqrt_stub, x); }
Tensor rsqrt(const Tensor& x) { return unary_float(kernels::rsqrt_stub, x); }
Tensor gelu(const Tensor& x, bool approximate) {
  return unary_float(approximate ? kernels::gelu_tanh_stub : kernels::gelu_stub, x);
}
Tensor tanh(const Tensor& x) { return unary_float(kernels::tanh_stub, x); }
Tensor sigmoid(const Tensor& x) { return unary_float(kernels::sigmoid_stub, x); }

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  detail::check_defined("clamp", x);
  EMBER_CHECK(min || max, "clamp: at least one of min and max must be given");
  EMBER_CHECK(x.dtype() != kBool, "clamp: bool tensors are not supported");
  auto fractional = [](std::optional<double> v) { return v && *v != std::floor(*v); };
  Tensor in = !is_floating(x.dtype()) && (fractional(min) || fractional(max)) ? x.to(kFloat32) : x;
  Tensor out = empty_like(in);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (out.numel() > 0) kernels::clamp_stub(in.device(), out, in, min.value_or(-kInf), max.value_or(kInf));
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
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
  return out;
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
