// Tensor's in-place arithmetic: add_, sub_, mul_, div_ and x += y, -=, *=, /=. Each
// against a float64 loop (broadcast `other` to this shape, convert it to this dtype) on
// contiguous tensors and strided views, and the refusals of Note [In-place arithmetic and
// autograd] in core/tensor.cpp. Runs on the CPU and, as NAME.cuda, on the emulated device.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "tests/core/reference.h"

namespace ember::test {
namespace {

struct InPlaceOp {
  const char* name;
  const Tensor& (Tensor::*tensor_form)(const Tensor&) const;
  const Tensor& (Tensor::*scalar_form)(Scalar) const;
  std::function<double(double, double)> ref;
};

const std::vector<InPlaceOp>& ops() {
  static const std::vector<InPlaceOp> all = {
      {"add_", &Tensor::add_, &Tensor::add_, [](double a, double b) { return a + b; }},
      {"sub_", &Tensor::sub_, &Tensor::sub_, [](double a, double b) { return a - b; }},
      {"mul_", &Tensor::mul_, &Tensor::mul_, [](double a, double b) { return a * b; }},
      {"div_", &Tensor::div_, &Tensor::div_, [](double a, double b) { return a / b; }},
  };
  return all;
}

// other (already of this dtype's values) broadcast to self's shape, the op per element.
std::vector<double> expected(const Tensor& self, const Tensor& other, const std::function<double(double, double)>& f) {
  return ref_binary(self, other.to(self.dtype()), f);
}

// Awkward sizes, a broadcast row and column, float32 and float64 operands in either
// direction: each op agrees with the float64 loop to one rounding of this dtype.
TEST(InPlaceArith, BroadcastsAndConvertsLikeTheLoop) {
  for (const InPlaceOp& op : ops()) {
    for (DType d : {kFloat32, kFloat64}) {
      for (const Shape& other_shape : {Shape{13, 37}, Shape{37}, Shape{13, 1}, Shape{}}) {
        Tensor x = random_tensor({13, 37}, d, Layout::Contiguous, 3);
        // Operands kept away from 0 so div_ is well conditioned; of the other float dtype.
        Tensor y = add(abs(random_tensor(other_shape, d == kFloat32 ? kFloat64 : kFloat32, Layout::Contiguous, 4)),
                       Scalar(0.5));
        const std::vector<double> want = expected(x, y, op.ref);
        const Tensor& r = (x.*op.tensor_form)(y);
        EXPECT_EQ(&r, &x) << op.name;
        EXPECT_EQ(x.dtype(), d) << op.name;
        EXPECT_TRUE(all_close(x, want, Shape{13, 37}, 2 * dtype_unit_roundoff(d), 0))
            << op.name << " " << dtype_name(d) << " other " << shape_str(other_shape);
      }
    }
  }
}

TEST(InPlaceArith, ScalarFormsEqualTensorForms) {
  for (const InPlaceOp& op : ops()) {
    for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
      Tensor a = random_tensor({9, 21}, kFloat32, layout, 7);
      Tensor b = a.clone();
      (a.*op.scalar_form)(Scalar(0.75));
      (b.*op.tensor_form)(full({}, 0.75, {kFloat32, b.device()}));
      EXPECT_TRUE(allclose(a, b, 0, 0)) << op.name << " " << layout_name(layout);
    }
  }
}

// The compound assignments are the in-place ops, and return this tensor.
TEST(InPlaceArith, CompoundAssignments) {
  Tensor x = tensor({1.0, 2.0, 3.0}, kFloat64);
  const Tensor alias = x;  // another handle on the same tensor sees every write
  x += tensor({10.0, 20.0, 30.0}, kFloat64);
  x -= 1;
  x *= tensor({2.0}, kFloat64);
  x /= 4;
  EXPECT_EQ(values(alias), (std::vector<double>{5, 10.5, 16}));
  EXPECT_EQ(&(x += 1), &x);
  Tensor i = tensor({7, -7, 9}, kInt64);
  i *= 3;
  i -= tensor({1, 1, 1}, kInt64);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{20, -22, 26}));
}

// A slice, a column and a transposed view are written in place; the rest of the base is
// untouched (the strided views take the two-pass route, the rows the one-pass one).
TEST(InPlaceArith, ViewsWriteIntoTheirBase) {
  for (const InPlaceOp& op : ops()) {
    Tensor base = add(iota({4, 6}, kFloat64), Scalar(1));
    std::vector<double> want = values(base);
    Tensor rows = base.slice(0, 1, 3);     // contiguous, at an offset
    Tensor col = base.select(1, 4);         // stride 6
    const Tensor y = full({6}, 2, {kFloat64, base.device()});
    (rows.*op.tensor_form)(y);
    (col.*op.scalar_form)(Scalar(4));
    for (int64_t r = 1; r < 3; ++r)
      for (int64_t c = 0; c < 6; ++c) want[r * 6 + c] = op.ref(want[r * 6 + c], 2);
    for (int64_t r = 0; r < 4; ++r) want[r * 6 + 4] = op.ref(want[r * 6 + 4], 4);
    EXPECT_EQ(values(base), want) << op.name;
    Tensor t = add(iota({3, 5}, kFloat64), Scalar(1));
    std::vector<double> tw = values(t);
    t.t().slice(0, 1, 4).mul_(tensor({1.0, 10.0, 100.0}, kFloat64).unsqueeze(1));  // columns 1-3 scaled by 1, 10, 100
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t c = 1; c < 4; ++c) tw[r * 5 + c] *= std::pow(10.0, c - 1);
    EXPECT_EQ(values(t), tw);
  }
}

// An operand that overlaps this tensor through another view is read as it was before the
// op (x[1:] += x[:-1] adds the old values), and x op= x uses each element once.
TEST(InPlaceArith, OverlappingOperandReadsOldValues) {
  Tensor x = tensor({1.0, 2.0, 4.0, 8.0, 16.0}, kFloat64);
  x.slice(0, 1, 5) += x.slice(0, 0, 4);
  EXPECT_EQ(values(x), (std::vector<double>{1, 3, 6, 12, 24}));
  x *= x;
  EXPECT_EQ(values(x), (std::vector<double>{1, 9, 36, 144, 576}));
  Tensor m = iota({3, 3}, kFloat64);
  m -= m.t();  // antisymmetric part, twice
  EXPECT_EQ(values(m), (std::vector<double>{0, -2, -4, 2, 0, -2, 4, 2, 0}));
}

// Integers: add_, sub_ and mul_ keep the dtype, a float operand converted first (as add_
// has always done); div_ refuses, since true division would truncate.
TEST(InPlaceArith, IntegerTensors) {
  Tensor i = tensor({5, 6, 7}, kInt64);
  i.mul_(tensor({2.9, 2.9, 2.9}, kFloat32));  // 2.9 -> 2
  i.sub_(Scalar(1));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{9, 11, 13}));
  EXPECT_THROW(i.div_(Scalar(2)), Error);
  EXPECT_THROW(i /= tensor({2, 2, 2}, kInt64), Error);
  EXPECT_THROW(tensor({1.0}, kBool).add_(Scalar(1)), Error);
}

TEST(InPlaceArith, BadArgumentsAreErrors) {
  for (const InPlaceOp& op : ops()) {
    Tensor x = zeros({2, 3});
    EXPECT_THROW((x.*op.tensor_form)(zeros({4})), Error) << op.name;           // does not broadcast
    EXPECT_THROW((zeros({1, 3}).*op.tensor_form)(ones({2, 3})), Error) << op.name;  // would grow the destination
    EXPECT_THROW((x.*op.tensor_form)(Tensor()), Error) << op.name;
    EXPECT_THROW((Tensor().*op.scalar_form)(Scalar(1)), Error) << op.name;
    Tensor e = zeros({3}).unsqueeze(0).expand({4, 3});  // one element under four indices
    EXPECT_THROW((e.*op.scalar_form)(Scalar(1)), Error) << op.name;
  }
}

// Note [In-place arithmetic and autograd]: with grad mode on, a tensor that requires grad
// is refused on either side, with a message that says what to write; under a NoGradGuard
// (a parameter update) both are allowed, and nothing is recorded.
TEST(InPlaceArith, RefusesTensorsThatRequireGradUnderGradMode) {
  for (const InPlaceOp& op : ops()) {
    Tensor w = ones({3}, kFloat64);
    w.requires_grad_();
    Tensor plain = ones({3}, kFloat64);
    try {
      (w.*op.tensor_form)(plain);
      ADD_FAILURE() << op.name << " wrote into a leaf that requires grad";
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), op.name) && contains(e.what(), "write x = x ")) << e.what();
    }
    EXPECT_THROW((w.*op.scalar_form)(Scalar(2)), Error) << op.name;
    EXPECT_THROW((plain.*op.tensor_form)(w), Error) << op.name << ": the operand's gradient would be lost";
    Tensor h = mul(w, Scalar(2));  // a graph output
    EXPECT_THROW((h.*op.scalar_form)(Scalar(2)), Error) << op.name;
    EXPECT_THROW((w.slice(0, 0, 2).*op.scalar_form)(Scalar(2)), Error) << op.name << ": a view of the leaf";
    {
      NoGradGuard no_grad;
      (w.*op.tensor_form)(full({3}, 2, {kFloat64, w.device()}));
      (plain.*op.tensor_form)(w);
    }
    EXPECT_TRUE(w.requires_grad() && w.is_leaf()) << op.name;
    EXPECT_EQ(values(w), std::vector<double>(3, op.ref(1, 2))) << op.name;
  }
}

// The recorded spelling gives the gradients the in-place one cannot.
TEST(InPlaceArith, OutOfPlaceSpellingDifferentiates) {
  Tensor w = tensor({1.0, 2.0}, kFloat64);
  w.requires_grad_();
  Tensor x = tensor({3.0, 4.0}, kFloat64);
  x = x * w;  // what x *= w would have meant
  sum(x).backward();
  EXPECT_EQ(values(w.grad()), (std::vector<double>{3, 4}));
}

}  // namespace
}  // namespace ember::test
