// Elementwise ops against a float64 loop reference: every unary and binary op, on sizes
// 0 … 100003, broadcast shapes, non-contiguous inputs (transposed, step-2 slices,
// expanded), the float dtypes (16-bit ones compared with the reference of their rounded
// inputs) and integer arithmetic; then scalar overloads, operators, PyTorch's type
// promotion, where(), and the error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <tuple>
#include <vector>

#include "ember.h"
#include "reference.h"

namespace ember::test {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();
const std::vector<DType> kFloatTypes = {kFloat32, kFloat64, kBFloat16, kFloat16};

struct Tol {
  double rtol, atol;
};
// f32: arithmetic is correctly rounded (one rounding, 6e-8 relative); transcendental
// functions may be a few ulps off. 16-bit types compute in float from exact inputs and
// round the result once: u16 |y| (u16 = 2^-8 bf16, 2^-11 f16) on top of (1 + u16) times
// the float32 error.
Tol tol_for(DType d, bool transcendental) {
  const Tol f32 = transcendental ? Tol{1e-5, 1e-6} : Tol{1e-6, 1e-6};
  switch (d) {
    case DType::Float32: return f32;
    case DType::Float64: return {1e-12, 1e-12};
    case DType::BFloat16:
    case DType::Float16: {
      const double u16 = dtype_unit_roundoff(d);
      return {u16 + (1 + u16) * f32.rtol, (1 + u16) * f32.atol};
    }
    default: return {0, 0};
  }
}

double ref_relu(double x) { return std::isnan(x) ? x : (x > 0 ? x : 0.0); }
double ref_gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double ref_gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}
double ref_clamp(double x, double lo, double hi) { return std::isnan(x) ? x : (x < lo ? lo : (x > hi ? hi : x)); }
double identity(double x) { return x; }
double positive(double x) { return std::fabs(x) + 0.05; }

struct UnaryCase {
  const char* name;
  Tensor (*op)(const Tensor&);
  double (*ref)(double);
  double (*domain)(double);  // maps N(0,1) draws into the op's domain
  bool transcendental;
};
const UnaryCase kUnary[] = {
    {"neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }, identity, false},
    {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::fabs(x); }, identity, false},
    {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, identity, true},
    {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, positive, true},
    {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, positive, false},
    {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, positive, true},
    {"relu", [](const Tensor& x) { return relu(x); }, ref_relu, identity, false},
    {"gelu", [](const Tensor& x) { return gelu(x); }, ref_gelu, identity, true},
    {"gelu_tanh", [](const Tensor& x) { return gelu(x, true); }, ref_gelu_tanh, identity, true},
    {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, identity, true},
    {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double x) { return 1 / (1 + std::exp(-x)); },
     identity, true},
    {"clamp_min", [](const Tensor& x) { return clamp(x, -0.5, std::nullopt); },
     [](double x) { return ref_clamp(x, -0.5, kInf); }, identity, false},
    {"clamp_max", [](const Tensor& x) { return clamp(x, std::nullopt, 0.7); },
     [](double x) { return ref_clamp(x, -kInf, 0.7); }, identity, false},
    {"clamp_both", [](const Tensor& x) { return clamp(x, -0.3, 0.4); },
     [](double x) { return ref_clamp(x, -0.3, 0.4); }, identity, false},
};

struct InputCase {
  Shape shape;
  Layout layout;
};
std::vector<InputCase> input_cases() {
  std::vector<InputCase> v;
  for (int64_t n : {0, 1, 7, 31, 1000, 100003}) {
    v.push_back({{n}, Layout::Contiguous});
    v.push_back({{n}, Layout::Strided});
  }
  v.push_back({{}, Layout::Contiguous});
  v.push_back({{7, 31}, Layout::Transposed});
  v.push_back({{31, 7, 3}, Layout::Transposed});
  v.push_back({{0, 5}, Layout::Transposed});
  v.push_back({{5, 9}, Layout::Strided});
  return v;
}
std::string trace(const char* op, DType d, const Shape& s, Layout l) {
  return std::string(op) + " " + std::string(dtype_name(d)) + " " + shape_str(s) + " " + layout_name(l);
}

TEST(Elementwise, UnaryOpsMatchFloat64Reference) {
  uint64_t seed = 100;
  for (const UnaryCase& c : kUnary) {
    for (DType d : kFloatTypes) {
      for (const InputCase& in : input_cases()) {
        SCOPED_TRACE(trace(c.name, d, in.shape, in.layout));
        Tensor x = random_tensor(in.shape, d, in.layout, ++seed, c.domain);
        if (in.layout != Layout::Contiguous && x.numel() > 1) {
          ASSERT_FALSE(x.is_contiguous());
        }
        Tensor y = c.op(x);
        EXPECT_DTYPE(y, d);
        Tol t = tol_for(d, c.transcendental);
        EXPECT_CLOSE(y, ref_unary(x, c.ref), in.shape, t.rtol, t.atol);
      }
    }
  }
}

TEST(Elementwise, UnarySpecialValues) {
  // relu: exact zeros (both signs) give 0, NaN stays NaN, infinities behave.
  Tensor x = tensor({-1.5, 0.0, -0.0, 2.0, kNaN, kInf, -kInf}, kFloat32);
  EXPECT_CLOSE(relu(x), std::vector<double>({0, 0, 0, 2, kNaN, kInf, 0}), Shape{7}, 0, 0);
  EXPECT_CLOSE(abs(x), std::vector<double>({1.5, 0, 0, 2, kNaN, kInf, kInf}), Shape{7}, 0, 0);
  EXPECT_CLOSE(exp(tensor({-kInf, 0.0, kNaN}, kFloat64)), std::vector<double>({0, 1, kNaN}), Shape{3}, 0, 0);
  EXPECT_CLOSE(sigmoid(tensor({-kInf, kInf, 0.0}, kFloat32)), std::vector<double>({0, 1, 0.5}), Shape{3}, 0, 0);
  // Large |x|: a naive sigmoid/tanh overflows exp into inf/inf = NaN.
  EXPECT_CLOSE(sigmoid(tensor({-200.0, 200.0}, kFloat32)), std::vector<double>({0, 1}), Shape{2}, 0, 1e-30);
  EXPECT_CLOSE(tanh(tensor({-200.0, 200.0}, kFloat32)), std::vector<double>({-1, 1}), Shape{2}, 0, 0);
  EXPECT_CLOSE(log(tensor({0.0, -1.0}, kFloat32)), std::vector<double>({-kInf, kNaN}), Shape{2}, 0, 0);
}

TEST(Elementwise, UnaryOnIntegers) {
  Tensor x = tensor({-3, 0, 5, -7}, kInt32);
  Tensor n = neg(x), a = abs(x), e = exp(x);
  EXPECT_DTYPE(n, kInt32);
  EXPECT_DTYPE(a, kInt32);
  EXPECT_CLOSE(n, std::vector<double>({3, 0, -5, 7}), Shape{4}, 0, 0);
  EXPECT_CLOSE(a, std::vector<double>({3, 0, 5, 7}), Shape{4}, 0, 0);
  EXPECT_DTYPE(e, kFloat32);  // integer inputs compute in float32, as in PyTorch
  EXPECT_CLOSE(e, std::vector<double>({std::exp(-3.0), 1, std::exp(5.0), std::exp(-7.0)}), Shape{4}, 1e-6, 0);
}

struct BinaryCase {
  const char* name;
  Tensor (*op)(const Tensor&, const Tensor&);
  double (*ref)(double, double);
  double (*domain_a)(double);
  double (*domain_b)(double);
  enum Kind { kArith, kTranscendental, kCompare } kind;
};
double away_from_zero(double x) { return x < 0 ? x - 0.5 : x + 0.5; }
double small_int(double x) { return std::round(2 * x); }  // many ties, exact in every dtype
double pow_base(double x) { return std::fabs(x) + 0.3; }
double ref_maximum(double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : (a > b ? a : b); }
double ref_minimum(double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : (a < b ? a : b); }
const BinaryCase kBinary[] = {
    {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; },
     identity, identity, BinaryCase::kArith},
    {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double a, double b) { return a - b; },
     identity, identity, BinaryCase::kArith},
    {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double a, double b) { return a * b; },
     identity, identity, BinaryCase::kArith},
    {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double a, double b) { return a / b; },
     identity, away_from_zero, BinaryCase::kArith},
    {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
     [](double a, double b) { return std::pow(a, b); }, pow_base, identity, BinaryCase::kTranscendental},
    {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, ref_maximum, small_int, small_int,
     BinaryCase::kArith},
    {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, ref_minimum, small_int, small_int,
     BinaryCase::kArith},
    {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); },
     [](double a, double b) { return double(a == b); }, small_int, small_int, BinaryCase::kCompare},
    {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); },
     [](double a, double b) { return double(a != b); }, small_int, small_int, BinaryCase::kCompare},
    {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); },
     [](double a, double b) { return double(a < b); }, small_int, small_int, BinaryCase::kCompare},
    {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); },
     [](double a, double b) { return double(a <= b); }, small_int, small_int, BinaryCase::kCompare},
    {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); },
     [](double a, double b) { return double(a > b); }, small_int, small_int, BinaryCase::kCompare},
    {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); },
     [](double a, double b) { return double(a >= b); }, small_int, small_int, BinaryCase::kCompare},
};

// Runs one binary case on a and b and compares with the reference.
void check_binary(const BinaryCase& c, const Tensor& a, const Tensor& b) {
  Shape shape;
  std::vector<double> want = ref_binary(a, b, c.ref, &shape);
  Tensor y = c.op(a, b);
  DType d = promote_types(a.dtype(), b.dtype());
  if (c.kind == BinaryCase::kCompare) {
    EXPECT_DTYPE(y, kBool);
    EXPECT_CLOSE(y, want, shape, 0, 0);
  } else {
    EXPECT_DTYPE(y, d);
    Tol t = tol_for(d, c.kind == BinaryCase::kTranscendental);
    EXPECT_CLOSE(y, want, shape, t.rtol, t.atol);
  }
}

TEST(Elementwise, BinaryOpsSameShape) {
  uint64_t seed = 5000;
  for (const BinaryCase& c : kBinary) {
    for (DType d : kFloatTypes) {
      for (const InputCase& in : input_cases()) {
        SCOPED_TRACE(trace(c.name, d, in.shape, in.layout));
        Tensor a = random_tensor(in.shape, d, in.layout, ++seed, c.domain_a);
        Tensor b = random_tensor(in.shape, d, Layout::Contiguous, ++seed, c.domain_b);
        check_binary(c, a, b);
        // And the non-contiguous operand second.
        Tensor a2 = random_tensor(in.shape, d, Layout::Contiguous, ++seed, c.domain_a);
        Tensor b2 = random_tensor(in.shape, d, in.layout, ++seed, c.domain_b);
        check_binary(c, a2, b2);
      }
    }
  }
}

TEST(Elementwise, BinaryOpsBroadcast) {
  const std::vector<std::pair<Shape, Shape>> pairs = {
      {{3, 1, 5}, {4, 1}}, {{2, 3, 1, 4}, {3, 5, 1}}, {{4, 3}, {}}, {{}, {4, 3}}, {{2, 3}, {1}},
      {{5}, {3, 1}},       {{}, {}},                  {{2, 0, 3}, {1, 3}},       {{1, 1}, {6, 1, 2}}};
  uint64_t seed = 9000;
  for (const BinaryCase& c : kBinary) {
    for (DType d : {kFloat32, kFloat64, kBFloat16}) {
      for (const auto& [sa, sb] : pairs) {
        for (Layout la : {Layout::Contiguous, Layout::Transposed}) {
          SCOPED_TRACE(trace(c.name, d, sa, la) + " with " + shape_str(sb));
          Tensor a = random_tensor(sa, d, la, ++seed, c.domain_a);
          Tensor b = random_tensor(sb, d, Layout::Strided, ++seed, c.domain_b);
          check_binary(c, a, b);
        }
      }
    }
  }
}

TEST(Elementwise, BinaryOpsExpandedOperands) {
  uint64_t seed = 12000;
  for (const BinaryCase& c : kBinary) {
    SCOPED_TRACE(c.name);
    Tensor a = random_tensor({3, 1}, kFloat32, Layout::Contiguous, ++seed, c.domain_a).expand({3, 4});
    Tensor b = random_tensor({3, 4}, kFloat32, Layout::Transposed, ++seed, c.domain_b);
    EXPECT_EQ(a.stride(1), 0);
    check_binary(c, a, b);
    check_binary(c, b, a);
    Tensor s = random_tensor({}, kFloat32, Layout::Contiguous, ++seed, c.domain_a).expand({2, 5});
    Tensor t = random_tensor({2, 5}, kFloat32, Layout::Strided, ++seed, c.domain_b);
    check_binary(c, s, t);
  }
}

TEST(Elementwise, MaximumMinimumPropagateNaN) {  // torch.maximum / minimum propagate NaN
  Tensor a = tensor({kNaN, 1.0, 2.0}, kFloat32), b = tensor({0.0, kNaN, 3.0}, kFloat32);
  EXPECT_CLOSE(maximum(a, b), std::vector<double>({kNaN, kNaN, 3}), Shape{3}, 0, 0);
  EXPECT_CLOSE(minimum(a, b), std::vector<double>({kNaN, kNaN, 2}), Shape{3}, 0, 0);
}

TEST(Elementwise, IntegerArithmeticIsExact) {
  auto ints = [](double x) { return std::round(100 * x); };
  auto nonzero = [](double x) { double r = std::round(100 * x); return r == 0 ? 7.0 : r; };
  uint64_t seed = 15000;
  for (DType d : {kInt32, kInt64}) {
    for (const auto& [sa, sb] : std::vector<std::pair<Shape, Shape>>{{{1000}, {1000}}, {{3, 1, 5}, {4, 1}}, {{7}, {}}}) {
      SCOPED_TRACE(std::string(dtype_name(d)) + " " + shape_str(sa) + " with " + shape_str(sb));
      Tensor a = random_tensor(sa, d, Layout::Strided, ++seed, ints);
      Tensor b = random_tensor(sb, d, Layout::Contiguous, ++seed, nonzero);
      Shape s;
      Tensor sum_ab = add(a, b), diff = sub(a, b), prod = mul(a, b), quot = div(a, b);
      EXPECT_DTYPE(sum_ab, d);
      EXPECT_DTYPE(diff, d);
      EXPECT_DTYPE(prod, d);
      EXPECT_CLOSE(sum_ab, ref_binary(a, b, [](double x, double y) { return x + y; }, &s), s, 0, 0);
      EXPECT_CLOSE(diff, ref_binary(a, b, [](double x, double y) { return x - y; }), s, 0, 0);
      EXPECT_CLOSE(prod, ref_binary(a, b, [](double x, double y) { return x * y; }), s, 0, 0);
      EXPECT_DTYPE(quot, kFloat32);  // true division
      EXPECT_CLOSE(quot, ref_binary(a, b, [](double x, double y) { return x / y; }), s, 1e-6, 0);
    }
  }
  // Past float32's 24-bit mantissa: int64 arithmetic must not round through float.
  Tensor big = tensor({16777217.0, -9007199254740991.0}, kInt64);
  EXPECT_EQ(add(big, tensor({1.0, 0.0}, kInt64)).to_vector<int64_t>(),
            (std::vector<int64_t>{16777218, -9007199254740991}));
}

TEST(Elementwise, ScalarOverloadsAndOperators) {
  Tensor x = random_tensor({4, 5}, kFloat32, Layout::Transposed, 77, away_from_zero);
  auto chk = [&](const Tensor& got, double (*f)(double)) {
    EXPECT_DTYPE(got, kFloat32);
    EXPECT_CLOSE(got, ref_unary(x, f), x.shape(), 1e-6, 1e-6);
  };
  chk(x + 2, [](double v) { return v + 2; });
  chk(2 - x, [](double v) { return 2 - v; });
  chk(x * 0.5, [](double v) { return v * 0.5; });
  chk(x / 3, [](double v) { return v / 3; });
  chk(2 * x, [](double v) { return 2 * v; });
  chk(x - 1.5, [](double v) { return v - 1.5; });
  chk(1 / x, [](double v) { return 1 / v; });
  chk(-x, [](double v) { return -v; });
  chk(add(x, 2), [](double v) { return v + 2; });
  chk(sub(x, 2), [](double v) { return v - 2; });
  chk(mul(x, 3), [](double v) { return v * 3; });
  chk(div(x, 4), [](double v) { return v / 4; });
  chk(pow(abs(x), 0.5), [](double v) { return std::sqrt(std::fabs(v)); });
  chk(pow(x, 2), [](double v) { return v * v; });
  EXPECT_CLOSE(lt(x, 0.25), ref_unary(x, [](double v) { return double(v < 0.25); }), x.shape(), 0, 0);
  EXPECT_CLOSE(ge(x, -1), ref_unary(x, [](double v) { return double(v >= -1); }), x.shape(), 0, 0);
  EXPECT_DTYPE(gt(x, 0), kBool);

  Tensor y = random_tensor({4, 5}, kFloat32, Layout::Strided, 78);
  EXPECT_TRUE(allclose(x + y, add(x, y), 0, 0));
  EXPECT_TRUE(allclose(x - y, sub(x, y), 0, 0));
  EXPECT_TRUE(allclose(x * y, mul(x, y), 0, 0));
  EXPECT_TRUE(allclose(x / y, div(x, y), 0, 0));

  // Scalars keep the tensor's dtype within its category, as in PyTorch.
  Tensor i = tensor({1, 2, 3}, kInt32);
  EXPECT_DTYPE(i + 2, kInt32);
  EXPECT_DTYPE(2 - i, kInt32);
  EXPECT_CLOSE(2 - i, std::vector<double>({1, 0, -1}), Shape{3}, 0, 0);
  EXPECT_DTYPE(i + 2.5, kFloat32);
  EXPECT_CLOSE(i + 2.5, std::vector<double>({3.5, 4.5, 5.5}), Shape{3}, 0, 0);
  EXPECT_DTYPE(i * 0.5, kFloat32);
  EXPECT_DTYPE(i / 3, kFloat32);
  EXPECT_CLOSE(i / 2, std::vector<double>({0.5, 1, 1.5}), Shape{3}, 0, 0);
  EXPECT_CLOSE(lt(i, 2.5), std::vector<double>({1, 1, 0}), Shape{3}, 0, 0);
  EXPECT_DTYPE(tensor({1.0}, kFloat16) * 0.5, kFloat16);
  EXPECT_DTYPE(tensor({1.0}, kBFloat16) + 2, kBFloat16);
  EXPECT_DTYPE(tensor({1.0}, kFloat32) + 1e-300, kFloat32);  // a double Scalar does not widen
  EXPECT_DTYPE(tensor({1.0, 0.0}, kBool) + 1, kInt64);      // bool tensor, int scalar: int64
}

// Note [Scalar operands]: a Scalar second operand reaches the backend as a host value,
// which a device passes to its kernel. The results equal those of the same op with the
// scalar as a tensor, bit for bit: every binary op, contiguous and transposed inputs,
// float, 16-bit and integer dtypes. On a device the op allocates its output, nothing else.
TEST(Elementwise, ScalarOperandsEqualTensorOperands) {
  using Op = Tensor (*)(const Tensor&, const Tensor&);
  using ScalarOp = Tensor (*)(const Tensor&, Scalar);
  const std::vector<std::tuple<const char*, Op, ScalarOp>> ops = {
      {"add", add, add}, {"sub", sub, sub}, {"mul", mul, mul}, {"div", div, div}, {"pow", pow, pow},
      {"eq", eq, eq},    {"ne", ne, ne},    {"lt", lt, lt},    {"le", le, le},    {"gt", gt, gt},   {"ge", ge, ge}};
  for (DType d : {kFloat32, kBFloat16, kInt64}) {
    for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
      const bool integer = d == kInt64;
      Tensor x = random_tensor({33, 17}, d, layout, 5, [&](double v) { return integer ? std::round(4 * v) : v; });
      const double s = integer ? 3 : 0.7;
      const Scalar scalar = integer ? Scalar(int64_t{3}) : Scalar(s);  // an integer Scalar keeps int64
      for (const auto& [name, op, scalar_op] : ops) {
        if (integer && std::string(name) == "pow") continue;  // integer pow with a negative base is not the point
        const Tensor want = op(x, full(x.shape(), s, {d, x.device()}));
        const int64_t before = memory_stats(x.device())["allocation.all.allocated"];
        const Tensor got = scalar_op(x, scalar);
        const bool converts = integer && std::string(name) == "div";  // x itself goes to float32 first
        if (!x.device().is_cpu() && !converts)
          EXPECT_EQ(memory_stats(x.device())["allocation.all.allocated"] - before, 1) << name << ": the output only";
        EXPECT_DTYPE(got, want.dtype());
        EXPECT_TRUE(allclose(got, want, 0, 0, /*equal_nan=*/true)) << name << " " << dtype_name(d) << " "
                                                                    << layout_name(layout);
      }
    }
  }
  Tensor f = random_tensor({5, 7}, kFloat32, Layout::Strided, 6);
  Tensor g = f.clone();
  f.add_(Scalar(2.5));  // in place, strided, and contiguous below
  EXPECT_TRUE(allclose(f, add(g, full(g.shape(), 2.5, {kFloat32, g.device()})), 0, 0));
  Tensor i = tensor({1, 2, 3}, kInt64);
  i.add_(Scalar(2.7));  // converted to the tensor's dtype first, as add_(Tensor) does
  EXPECT_CLOSE(i, std::vector<double>({3, 4, 5}), Shape{3}, 0, 0);
}

TEST(Elementwise, TypePromotion) {
  struct P {
    DType a;
    Shape sa;
    DType b;
    Shape sb;
    DType want;
  };
  const P cases[] = {
      {kInt32, {3}, kInt64, {3}, kInt64},
      {kFloat16, {3}, kBFloat16, {3}, kFloat32},
      {kUInt8, {3}, kInt32, {3}, kInt32},
      {kBool, {3}, kInt32, {3}, kInt32},
      {kFloat32, {3}, kFloat64, {3}, kFloat64},
      {kInt64, {3}, kFloat16, {3}, kFloat16},
      // A 0-dim tensor of the same category does not widen a dimensioned one.
      {kFloat32, {3}, kFloat64, {}, kFloat32},
      {kInt32, {3}, kInt64, {}, kInt32},
      {kFloat16, {3}, kFloat32, {}, kFloat16},
      {kFloat64, {}, kFloat32, {3}, kFloat32},
      // A 0-dim tensor of a higher category wins with its own dtype (PyTorch's
      // combine_categories: promote_types(int32, float64) = float64). Only wrapped Python
      // scalars, ember's Scalar, fall back to the default float32 / int64.
      {kInt32, {3}, kFloat64, {}, kFloat64},
      {kBool, {3}, kInt32, {}, kInt32},
      {kInt32, {}, kFloat16, {3}, kFloat16},
      // Both 0-dim: ordinary promote_types.
      {kFloat32, {}, kFloat64, {}, kFloat64},
  };
  for (const P& p : cases) {
    SCOPED_TRACE(std::string(dtype_name(p.a)) + shape_str(p.sa) + " + " + std::string(dtype_name(p.b)) +
                 shape_str(p.sb));
    Tensor a = make_tensor(std::vector<double>(shape_numel(p.sa), 1.0), p.sa, p.a);
    Tensor b = make_tensor(std::vector<double>(shape_numel(p.sb), 0.0), p.sb, p.b);
    Tensor s = add(a, b), q = mul(b, a);
    EXPECT_DTYPE(s, p.want);
    EXPECT_DTYPE(q, p.want);
    Shape out = broadcast_all({p.sa, p.sb});
    EXPECT_CLOSE(s, std::vector<double>(shape_numel(out), 1.0), out, 0, 0);
    EXPECT_DTYPE(lt(a, b), kBool);
  }
  // Values: float16 + bfloat16 computes in float32.
  Tensor h = random_tensor({50}, kFloat16, Layout::Contiguous, 3), bf = random_tensor({50}, kBFloat16, Layout::Strided, 4);
  Shape s;
  std::vector<double> want = ref_binary(h, bf, [](double x, double y) { return x + y; }, &s);
  EXPECT_CLOSE(add(h, bf), want, s, 1e-6, 1e-6);
  Tensor i = tensor({1, 2, 3}, kInt32);
  EXPECT_CLOSE(i + scalar_tensor(0.25, kFloat64), std::vector<double>({1.25, 2.25, 3.25}), Shape{3}, 0, 0);
}

TEST(Elementwise, Where) {
  Tensor cond = make_tensor({1, 0, 1}, {3, 1}, kBool);
  Tensor a = random_tensor({1, 4}, kInt32, Layout::Contiguous, 1, [](double v) { return std::round(10 * v); });
  Tensor b = random_tensor({3, 4}, kFloat32, Layout::Transposed, 2);
  auto pick = [](const Tensor& c, const Tensor& x, const Tensor& y, Shape* shape) {
    *shape = broadcast_all({c.shape(), x.shape(), y.shape()});
    std::vector<double> vc = values(c), vx = values(x), vy = values(y), out(shape_numel(*shape));
    for (int64_t k = 0; k < static_cast<int64_t>(out.size()); ++k) {
      Shape idx = unravel(k, *shape);
      out[k] = vc[broadcast_source(idx, c.shape())] != 0 ? vx[broadcast_source(idx, x.shape())]
                                                         : vy[broadcast_source(idx, y.shape())];
    }
    return out;
  };
  Shape s;
  Tensor w = where(cond, a, b);
  EXPECT_DTYPE(w, kFloat32);
  EXPECT_CLOSE(w, pick(cond, a, b, &s), s, 0, 0);
  EXPECT_EQ(s, (Shape{3, 4}));

  Tensor c2 = random_tensor({2, 3}, kBool, Layout::Transposed, 3, [](double v) { return double(v > 0); });
  Tensor h = random_tensor({2, 3}, kFloat16, Layout::Contiguous, 4), bf = random_tensor({3}, kBFloat16, Layout::Strided, 5);
  Tensor w2 = where(c2, h, bf);
  EXPECT_DTYPE(w2, kFloat32);
  EXPECT_CLOSE(w2, pick(c2, h, bf, &s), s, 0, 0);

  Tensor c3 = random_tensor({1000}, kBool, Layout::Strided, 6, [](double v) { return double(v > 0.3); });
  Tensor x3 = random_tensor({1000}, kFloat64, Layout::Strided, 7), y3 = random_tensor({}, kFloat64, Layout::Contiguous, 8);
  EXPECT_CLOSE(where(c3, x3, y3), pick(c3, x3, y3, &s), s, 0, 0);

  EXPECT_EMBER_ERROR(where(make_tensor({1, 0, 1}, {3, 1}, kFloat32), a, b), "where");  // cond not bool
  EXPECT_EMBER_ERROR(where(make_tensor({1, 0}, {2}, kBool), tensor({1.0, 2.0, 3.0}), tensor({1.0})), "where");
}

TEST(Elementwise, ErrorsNameTheOpAndShapes) {
  Tensor a = zeros({2, 3}), b = zeros({4});
  EXPECT_EMBER_ERROR(add(a, b), "add", "[2, 3]", "[4]");
  EXPECT_EMBER_ERROR(a + b, "add", "[2, 3]", "[4]");
  EXPECT_EMBER_ERROR(sub(a, b), "sub", "[2, 3]", "[4]");
  EXPECT_EMBER_ERROR(mul(a, b), "mul", "[2, 3]", "[4]");
  EXPECT_EMBER_ERROR(div(a, b), "div", "[2, 3]", "[4]");
  EXPECT_EMBER_ERROR(maximum(zeros({3, 2}), zeros({3})), "maximum", "[3, 2]", "[3]");
  EXPECT_EMBER_ERROR(eq(zeros({5}), zeros({2, 4})), "eq", "[5]", "[2, 4]");
  // Ops across devices need a GPU build and device; not testable here.
}

}  // namespace
}  // namespace ember::test
