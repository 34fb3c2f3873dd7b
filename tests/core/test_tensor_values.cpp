// Tensor values, printing and construction: item, at, to_vector, str(),
// empty/tensor/scalar_tensor.
//
// Most tests start from iota(shape): the values 0, 1, 2, ... in row-major order, so an
// element's value is its linear index in the original tensor, and the expected values
// of a view can be written down by hand (or computed from the original's strides).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/ops.h"
#include "core/tensor.h"

#include "tests/core/reference.h"

namespace ember {
namespace {

using test::error_message;
using test::contains;
using test::iota;
using test::values;




TEST(TensorViews, Item) {
  EXPECT_EQ(scalar_tensor(3.5).item(), 3.5);
  EXPECT_EQ(tensor({42}, kInt64).item<int64_t>(), 42);
  EXPECT_EQ(ones({1, 1, 1}).item<float>(), 1.0f);
  EXPECT_EQ(iota({2, 3}).select(0, 1).select(0, 2).item<int>(), 5);
  EXPECT_EQ(scalar_tensor(true, kBool).item<bool>(), true);
  std::string msg = error_message([] { iota({2, 3}).item(); });
  EXPECT_TRUE(contains(msg, "item")) << msg;
  EXPECT_THROW(empty({0}).item(), Error);
}

TEST(TensorViews, At) {
  Tensor x = iota({3, 4});
  EXPECT_EQ(x.at({1, 2}), 6.0);
  EXPECT_EQ(x.t().at({2, 1}), 6.0);
  EXPECT_EQ(x.narrow(1, 1, 2).at({2, 1}), 10.0);
  EXPECT_EQ(scalar_tensor(2.0).at({}), 2.0);
  EXPECT_THROW(x.at({3, 0}), Error);
  EXPECT_THROW(x.at({0, -5}), Error);
  EXPECT_THROW(x.at({0}), Error);
  EXPECT_THROW(x.at({0, 0, 0}), Error);
}

TEST(TensorViews, ToVectorConverts) {
  Tensor x = tensor({1.25, -2.5, 3.0}, kFloat64);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1.25f, -2.5f, 3.0f}));
  EXPECT_EQ(x.to_vector<int64_t>(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(x.to_vector<double>(), (std::vector<double>{1.25, -2.5, 3.0}));
  EXPECT_TRUE(empty({0, 3}).to_vector<float>().empty());
  EXPECT_EQ(scalar_tensor(4).to_vector<int32_t>(), (std::vector<int32_t>{4}));
}

// ----- printing -----

TEST(TensorViews, PrintsInPyTorchLayout) {
  Tensor x = tensor({1.5, -2.25, 3.125, 4.0}, {2, 2}, kFloat64);
  std::string s = x.str();
  EXPECT_TRUE(contains(s, "tensor(")) << s;
  EXPECT_TRUE(contains(s, "[[")) << s;
  EXPECT_TRUE(contains(s, "1.5")) << s;
  EXPECT_TRUE(contains(s, "-2.25")) << s;
  EXPECT_TRUE(contains(s, "3.125")) << s;
  EXPECT_TRUE(contains(s, "dtype=float64")) << s;
  EXPECT_LT(s.find("1.5"), s.find("3.125")) << s;  // row-major order
  std::ostringstream os;
  os << x;
  EXPECT_EQ(os.str(), s);
  // A view prints its own values.
  std::string ts = x.t().str();
  EXPECT_LT(ts.find("1.5"), ts.find("3.125")) << ts;
  EXPECT_LT(ts.find("3.125"), ts.find("-2.25")) << ts;
  std::string is = tensor({7, -8}, kInt32).str();
  EXPECT_TRUE(contains(is, "7")) << is;
  EXPECT_TRUE(contains(is, "-8")) << is;
  EXPECT_TRUE(contains(is, "int32")) << is;
}

TEST(TensorViews, PrintsZeroDimAndEmpty) {
  std::string s0 = scalar_tensor(2.5, kFloat64).str();
  EXPECT_TRUE(contains(s0, "tensor(")) << s0;
  EXPECT_TRUE(contains(s0, "2.5")) << s0;
  EXPECT_FALSE(contains(s0, "[")) << "a 0-dim tensor prints no brackets: " << s0;
  std::string se = empty({0}).str();
  EXPECT_TRUE(contains(se, "tensor(")) << se;
  EXPECT_TRUE(contains(se, "[]")) << se;
  std::string se2 = empty({0, 3}).str();
  EXPECT_TRUE(contains(se2, "[]")) << se2;
}

TEST(TensorViews, BigTensorPrintSummarizes) {
  // int64 values, so the expected digits do not depend on a float format choice.
  Tensor x = arange(10000);
  std::string s = x.str();
  EXPECT_TRUE(contains(s, "...")) << s.substr(0, 300);
  EXPECT_LT(s.size(), 1000u);
  EXPECT_TRUE(contains(s, "9999")) << s;  // the tail is shown
  EXPECT_FALSE(contains(s, "5000")) << s;  // the middle is not
  std::string m = iota({200, 200}, kInt64).str();
  EXPECT_TRUE(contains(m, "...")) << m.substr(0, 300);
  EXPECT_LT(m.size(), 3000u);
  EXPECT_TRUE(contains(m, "39999")) << m;
}

// ----- views of views -----

TEST(TensorCreation, EmptyTensorAndScalarTensor) {
  Tensor e = empty({2, 3}, kInt32);
  EXPECT_EQ(e.shape(), (Shape{2, 3}));
  EXPECT_EQ(e.dtype(), kInt32);
  EXPECT_TRUE(e.is_contiguous());
  EXPECT_EQ(e.numel(), 6);
  EXPECT_EQ(empty({0, 5}).numel(), 0);
  EXPECT_EQ(empty({}).numel(), 1);

  Tensor t = tensor({1, 2, 3, 4, 5, 6}, {3, 2}, kInt64);
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.dtype(), kInt64);
  EXPECT_EQ(t.at({2, 0}), 5.0);
  Tensor v = tensor({0.5, 1.5});
  EXPECT_EQ(v.shape(), (Shape{2}));
  EXPECT_EQ(v.dtype(), kFloat32);
  EXPECT_EQ(tensor({}, {0}).numel(), 0);

  Tensor s = scalar_tensor(5);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.item(), 5.0);
  EXPECT_EQ(scalar_tensor(2.5, kFloat64).dtype(), kFloat64);
}

TEST(TensorCreation, TensorRejectsValueCountMismatch) {
  std::string msg = error_message([] { tensor({1, 2, 3}, {2, 2}); });
  EXPECT_TRUE(contains(msg, "3")) << msg;
  EXPECT_TRUE(contains(msg, "[2, 2]")) << msg;
  EXPECT_THROW(tensor({1, 2, 3, 4, 5}, {2, 2}), Error);
  EXPECT_THROW(tensor({}, {1}), Error);
  EXPECT_THROW(empty({2, -3}), Error);
  // Sizes whose products overflow int64 get an error, not a wrapped allocation: the
  // element count, the strides beside a zero dim, and the bytes.
  const int64_t big = int64_t(1) << 32;
  msg = error_message([&] { empty({big, big}); });
  EXPECT_TRUE(contains(msg, "too large") && contains(msg, "empty")) << msg;
  EXPECT_THROW(empty({big, 0, big}), Error);
  msg = error_message([&] { empty({int64_t(1) << 62}, {kFloat32}); });
  EXPECT_TRUE(contains(msg, "2^63 bytes")) << msg;
  EXPECT_THROW(zeros({1}).view({big, 0, -1, big}), Error);
  EXPECT_THROW(zeros({0}).view({big, big, 0}), Error);
}

}  // namespace
}  // namespace ember
