// Tests of Tensor's views (shape, strides, offset, shared storage), its copies, its
// in-place writes (values and printing are in test_tensor_values.cpp).
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




// ----- basic properties -----

TEST(TensorViews, ContiguousTensorLayout) {
  Tensor x = iota({2, 3, 4});
  EXPECT_TRUE(x.defined());
  EXPECT_FALSE(Tensor().defined());
  EXPECT_EQ(x.dim(), 3);
  EXPECT_EQ(x.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(x.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(x.offset(), 0);
  EXPECT_EQ(x.numel(), 24);
  EXPECT_EQ(x.element_size(), 4);
  EXPECT_EQ(x.dtype(), kFloat32);
  EXPECT_EQ(x.device(), default_device());
  EXPECT_TRUE(x.is_contiguous());
  EXPECT_EQ(x.size(0), 2);
  EXPECT_EQ(x.size(-1), 4);
  EXPECT_EQ(x.size(-3), 2);
  EXPECT_EQ(x.stride(-1), 1);
  EXPECT_EQ(x.stride(1), 4);
  EXPECT_THROW(x.size(3), Error);
  EXPECT_THROW(x.size(-4), Error);
  EXPECT_THROW(x.stride(3), Error);
}

TEST(TensorViews, TypedDataChecksTheDType) {
  Tensor x = iota({4});
  float* p = x.data<float>();
  EXPECT_EQ(static_cast<void*>(p), x.data_ptr());
  EXPECT_THROW(x.data<double>(), Error);
  EXPECT_THROW(x.data<int32_t>(), Error);
  // A view's data_ptr points at its first element, not at the storage's.
  Tensor v = x.narrow(0, 2, 2);
  EXPECT_EQ(v.data<float>(), p + 2);
  // The pointer is the device's: only the host may read through it.
  if (x.device().is_cpu()) {
    EXPECT_EQ(p[3], 3.0f);
    EXPECT_EQ(*v.data<float>(), 2.0f);
  }
}

// ----- view and reshape -----

TEST(TensorViews, ViewSharesStorageWithNewStrides) {
  Tensor x = iota({2, 3, 4});
  Tensor v = x.view({6, 4});
  EXPECT_EQ(v.shape(), (Shape{6, 4}));
  EXPECT_EQ(v.strides(), (Shape{4, 1}));
  EXPECT_TRUE(v.shares_storage_with(x));
  EXPECT_EQ(values(v), values(x));
  EXPECT_EQ(x.view({24}).strides(), (Shape{1}));
  EXPECT_EQ(x.view({4, 3, 2}).strides(), (Shape{6, 2, 1}));
  // Writes through the view are seen by the original.
  v.select(0, 5).fill_(-1);
  EXPECT_EQ(x.at({1, 2, 3}), -1.0);
  EXPECT_EQ(x.at({1, 2, 0}), -1.0);
  EXPECT_EQ(x.at({1, 1, 3}), 19.0);
}

TEST(TensorViews, ViewInfersMinusOne) {
  Tensor x = iota({2, 3, 4});
  EXPECT_EQ(x.view({-1}).shape(), (Shape{24}));
  EXPECT_EQ(x.view({-1, 4}).shape(), (Shape{6, 4}));
  EXPECT_EQ(x.view({2, -1}).shape(), (Shape{2, 12}));
  EXPECT_EQ(x.view({3, -1, 2}).shape(), (Shape{3, 4, 2}));
  EXPECT_EQ(x.reshape({-1, 6}).shape(), (Shape{4, 6}));
}

TEST(TensorViews, ViewErrors) {
  Tensor x = iota({2, 3, 4});
  EXPECT_THROW(x.view({-1, -1}), Error);
  EXPECT_THROW(x.view({-1, 5}), Error);  // 24 is not a multiple of 5
  EXPECT_THROW(x.view({-2, 12}), Error);
  std::string msg = error_message([&] { x.view({5, 5}); });
  EXPECT_TRUE(contains(msg, "[2, 3, 4]")) << msg;
  EXPECT_TRUE(contains(msg, "[5, 5]")) << msg;
  msg = error_message([&] { x.reshape({7}); });
  EXPECT_TRUE(contains(msg, "[2, 3, 4]")) << msg;
  EXPECT_TRUE(contains(msg, "[7]")) << msg;
  EXPECT_THROW(x.reshape({-1, -1}), Error);
  // view never copies, so strides that cannot be merged are an error.
  EXPECT_THROW(x.transpose(0, 1).view({24}), Error);
}

TEST(TensorViews, ReshapeOfContiguousIsAView) {
  Tensor x = iota({2, 3, 4});
  Tensor r = x.reshape({4, 6});
  EXPECT_TRUE(r.shares_storage_with(x));
  EXPECT_EQ(r.data_ptr(), x.data_ptr());
  EXPECT_EQ(values(r), values(x));
}

TEST(TensorViews, ReshapeOfTransposedCopies) {
  Tensor x = iota({2, 3});
  Tensor r = x.t().reshape({6});
  EXPECT_FALSE(r.shares_storage_with(x));
  EXPECT_TRUE(r.is_contiguous());
  EXPECT_EQ(values(r), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  r.fill_(9);  // the copy is independent
  EXPECT_EQ(values(x), (std::vector<double>{0, 1, 2, 3, 4, 5}));
}

TEST(TensorViews, ReshapeOfNonContiguousIsAViewWhenStridesAllow) {
  // Columns 0..2 of a [4, 6] tensor: shape [4, 3], strides [6, 1]. Splitting dim 0 keeps
  // the rows' stride pattern, so no copy is needed.
  Tensor x = iota({4, 6});
  Tensor n = x.narrow(1, 0, 3);
  ASSERT_FALSE(n.is_contiguous());
  Tensor r = n.reshape({2, 2, 3});
  EXPECT_TRUE(r.shares_storage_with(x));
  EXPECT_EQ(r.strides(), (Shape{12, 6, 1}));
  EXPECT_EQ(values(r), values(n));
  // Merging dims 0 and 1 of it is impossible without a copy.
  Tensor c = n.reshape({12});
  EXPECT_FALSE(c.shares_storage_with(x));
  EXPECT_EQ(values(c), (std::vector<double>{0, 1, 2, 6, 7, 8, 12, 13, 14, 18, 19, 20}));
}

// ----- permute, transpose -----

TEST(TensorViews, Permute) {
  Tensor x = iota({2, 3, 4});
  Tensor p = x.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 12, 4}));
  EXPECT_TRUE(p.shares_storage_with(x));
  EXPECT_FALSE(p.is_contiguous());
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(p.at({i, j, k}), x.at({j, k, i}));
  EXPECT_TRUE(x.permute({0, 1, 2}).is_contiguous());
}

TEST(TensorViews, PermuteRejectsBadPermutations) {
  Tensor x = iota({2, 3, 4});
  EXPECT_THROW(x.permute({0, 0, 1}), Error);
  EXPECT_THROW(x.permute({0, 1}), Error);
  EXPECT_THROW(x.permute({0, 1, 2, 3}), Error);
  EXPECT_THROW(x.permute({0, 1, 3}), Error);
  std::string msg = error_message([&] { x.permute({1, 1, 0}); });
  EXPECT_TRUE(contains(msg, "permute")) << msg;
}

TEST(TensorViews, TransposeAndT) {
  Tensor x = iota({2, 3, 4});
  Tensor t = x.transpose(0, 2);
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.strides(), (Shape{1, 4, 12}));
  EXPECT_EQ(t.at({3, 1, 0}), x.at({0, 1, 3}));
  Tensor neg = x.transpose(-1, -2);
  EXPECT_EQ(neg.shape(), (Shape{2, 4, 3}));
  EXPECT_EQ(neg.strides(), (Shape{12, 1, 4}));
  EXPECT_THROW(x.transpose(0, 3), Error);

  Tensor m = iota({2, 3});
  Tensor mt = m.t();
  EXPECT_EQ(mt.shape(), (Shape{3, 2}));
  EXPECT_EQ(mt.strides(), (Shape{1, 3}));
  EXPECT_TRUE(mt.shares_storage_with(m));
  EXPECT_EQ(values(mt), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_TRUE(mt.t().is_contiguous());
  Tensor v = iota({5});
  EXPECT_EQ(v.t().shape(), (Shape{5}));
  EXPECT_EQ(scalar_tensor(1.0).t().dim(), 0);
}

// ----- narrow, slice, select -----

TEST(TensorViews, Narrow) {
  Tensor x = iota({4, 5});
  Tensor n = x.narrow(1, 1, 3);
  EXPECT_EQ(n.shape(), (Shape{4, 3}));
  EXPECT_EQ(n.strides(), (Shape{5, 1}));
  EXPECT_EQ(n.offset(), 1);
  EXPECT_EQ(values(n), (std::vector<double>{1, 2, 3, 6, 7, 8, 11, 12, 13, 16, 17, 18}));
  Tensor r = x.narrow(0, 2, 2);
  EXPECT_EQ(r.offset(), 10);
  EXPECT_TRUE(r.is_contiguous());
  EXPECT_EQ(x.narrow(0, 4, 0).numel(), 0);
  EXPECT_THROW(x.narrow(1, 3, 3), Error);  // 3 + 3 > 5
  EXPECT_THROW(x.narrow(2, 0, 1), Error);
  EXPECT_THROW(x.narrow(0, 0, -1), Error);
}

TEST(TensorViews, SliceWithStep) {
  Tensor x = iota({10});
  Tensor s = x.slice(0, 1, 8, 3);
  EXPECT_EQ(s.shape(), (Shape{3}));
  EXPECT_EQ(s.strides(), (Shape{3}));
  EXPECT_EQ(s.offset(), 1);
  EXPECT_EQ(values(s), (std::vector<double>{1, 4, 7}));
  EXPECT_EQ(values(x.slice(0, 0, 10, 4)), (std::vector<double>{0, 4, 8}));
  EXPECT_EQ(values(x.slice(0, 1, 9, 4)), (std::vector<double>{1, 5}));  // end is exclusive
  Tensor m = iota({3, 6});
  Tensor ms = m.slice(1, 1, 6, 2);
  EXPECT_EQ(ms.shape(), (Shape{3, 3}));
  EXPECT_EQ(ms.strides(), (Shape{6, 2}));
  EXPECT_EQ(values(ms), (std::vector<double>{1, 3, 5, 7, 9, 11, 13, 15, 17}));
  EXPECT_THROW(x.slice(0, 0, 5, 0), Error);
  EXPECT_THROW(x.slice(1, 0, 5), Error);
}

TEST(TensorViews, SliceNegativeAndClampedBounds) {
  Tensor x = iota({10});
  EXPECT_EQ(values(x.slice(0, -3, 100)), (std::vector<double>{7, 8, 9}));
  EXPECT_EQ(values(x.slice(0, -100, 2)), (std::vector<double>{0, 1}));
  EXPECT_EQ(values(x.slice(0, 2, -5)), (std::vector<double>{2, 3, 4}));
  EXPECT_EQ(values(x.slice(0, 0, std::numeric_limits<int64_t>::max(), 3)), (std::vector<double>{0, 3, 6, 9}));
  EXPECT_EQ(x.slice(0, 5, 2).numel(), 0);  // start past end: empty, as in Python
  EXPECT_EQ(x.slice(0, 5, 2).shape(), (Shape{0}));
  EXPECT_EQ(x.slice(0, 20, 30).numel(), 0);
}

TEST(TensorViews, Select) {
  Tensor x = iota({3, 4});
  Tensor last = x.select(0, -1);
  EXPECT_EQ(last.shape(), (Shape{4}));
  EXPECT_EQ(last.offset(), 8);
  EXPECT_EQ(values(last), (std::vector<double>{8, 9, 10, 11}));
  Tensor col = x.select(1, 2);
  EXPECT_EQ(col.shape(), (Shape{3}));
  EXPECT_EQ(col.strides(), (Shape{4}));
  EXPECT_EQ(values(col), (std::vector<double>{2, 6, 10}));
  EXPECT_EQ(values(x.select(-1, -4)), (std::vector<double>{0, 4, 8}));
  Tensor s = x.select(0, 1).select(0, 3);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item(), 7.0);
}

TEST(TensorViews, SelectOutOfRangeNamesIndexAndSize) {
  Tensor x = iota({3, 4});
  std::string msg = error_message([&] { x.select(1, 7); });
  EXPECT_TRUE(contains(msg, "7")) << msg;
  EXPECT_TRUE(contains(msg, "4")) << msg;
  msg = error_message([&] { x.select(0, -5); });
  EXPECT_TRUE(contains(msg, "-5")) << msg;
  EXPECT_TRUE(contains(msg, "3")) << msg;
  EXPECT_THROW(x.select(0, 3), Error);
  EXPECT_THROW(x.select(2, 0), Error);
}

// ----- expand -----

TEST(TensorViews, ExpandUsesStrideZero) {
  Tensor x = tensor({1, 2, 3}, {3, 1});
  Tensor e = x.expand({3, 4});
  EXPECT_EQ(e.shape(), (Shape{3, 4}));
  EXPECT_EQ(e.strides()[1], 0);
  EXPECT_TRUE(e.shares_storage_with(x));
  EXPECT_EQ(values(e), (std::vector<double>{1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3}));
  Tensor lead = x.expand({2, 3, 4});
  EXPECT_EQ(lead.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(lead.strides()[0], 0);
  EXPECT_EQ(lead.strides()[2], 0);
  EXPECT_EQ(lead.at({1, 2, 3}), 3.0);
  Tensor keep = x.expand({-1, 5});
  EXPECT_EQ(keep.shape(), (Shape{3, 5}));
  Tensor y = iota({2, 3});
  EXPECT_EQ(y.expand_as(iota({4, 2, 3})).shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(y.expand({2, 3}).strides(), y.strides());
}

TEST(TensorViews, ExpandErrors) {
  Tensor x = tensor({1, 2, 3}, {3, 1});
  EXPECT_THROW(x.expand({4, 4}), Error);  // dim 0 has size 3, not 1
  EXPECT_THROW(x.expand({4}), Error);     // fewer dims than the tensor
  EXPECT_THROW(x.expand({-1, 4, 4}), Error);  // -1 for a new leading dim
  EXPECT_THROW(x.expand({3, -5}), Error);     // a size-1 dim to a negative size
  // 2^32 * 2^32 elements: numel would overflow int64, so would the strides with a zero dim.
  EXPECT_TRUE(contains(error_message([&] { x.expand({int64_t(1) << 32, 3, int64_t(1) << 32}); }), "too large"));
  EXPECT_THROW(x.expand({int64_t(1) << 32, 0, 3, int64_t(1) << 32}), Error);
  std::string msg = error_message([&] { x.expand({2, 4}); });
  EXPECT_TRUE(contains(msg, "expand")) << msg;
  EXPECT_TRUE(contains(msg, "[3, 1]")) << msg;
}

// ----- squeeze, unsqueeze, flatten -----

TEST(TensorViews, SqueezeAndUnsqueeze) {
  Tensor x = iota({1, 3, 1, 2});
  EXPECT_EQ(x.squeeze().shape(), (Shape{3, 2}));
  EXPECT_EQ(x.squeeze(0).shape(), (Shape{3, 1, 2}));
  EXPECT_EQ(x.squeeze(-2).shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(x.squeeze(1).shape(), (Shape{1, 3, 1, 2}));  // not size 1: unchanged, as in PyTorch
  EXPECT_TRUE(x.squeeze().shares_storage_with(x));
  EXPECT_EQ(values(x.squeeze()), values(x));
  EXPECT_EQ(iota({1, 1}).squeeze().dim(), 0);
  EXPECT_THROW(x.squeeze(4), Error);

  Tensor y = iota({3, 2});
  EXPECT_EQ(y.unsqueeze(0).shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(y.unsqueeze(1).shape(), (Shape{3, 1, 2}));
  EXPECT_EQ(y.unsqueeze(2).shape(), (Shape{3, 2, 1}));
  EXPECT_EQ(y.unsqueeze(-1).shape(), (Shape{3, 2, 1}));
  EXPECT_EQ(y.unsqueeze(-3).shape(), (Shape{1, 3, 2}));
  EXPECT_TRUE(y.unsqueeze(1).shares_storage_with(y));
  EXPECT_EQ(y.unsqueeze(1).at({2, 0, 1}), 5.0);
  EXPECT_EQ(y.t().unsqueeze(0).at({0, 1, 2}), 5.0);
  EXPECT_THROW(y.unsqueeze(3), Error);
  EXPECT_THROW(y.unsqueeze(-4), Error);
}

TEST(TensorViews, Flatten) {
  Tensor x = iota({2, 3, 4});
  EXPECT_EQ(x.flatten().shape(), (Shape{24}));
  EXPECT_EQ(x.flatten(1).shape(), (Shape{2, 12}));
  EXPECT_EQ(x.flatten(0, 1).shape(), (Shape{6, 4}));
  EXPECT_EQ(x.flatten(-2, -1).shape(), (Shape{2, 12}));
  EXPECT_EQ(x.flatten(1, 1).shape(), (Shape{2, 3, 4}));
  EXPECT_TRUE(x.flatten().shares_storage_with(x));
  // A permuted tensor cannot be flattened in place: the result is a copy in the new order.
  Tensor pf = x.permute({2, 0, 1}).flatten();
  EXPECT_EQ(pf.shape(), (Shape{24}));
  EXPECT_EQ(pf.at({1}), 4.0);   // p[0][0][1] = x[0][1][0]
  EXPECT_EQ(pf.at({6}), 1.0);   // p[1][0][0] = x[0][0][1]
  EXPECT_EQ(scalar_tensor(3.0).flatten().shape(), (Shape{1}));
  EXPECT_THROW(x.flatten(2, 1), Error);
}

// ----- copies -----

TEST(TensorViews, ContiguousIsIdentityWhenAlreadyContiguous) {
  Tensor x = iota({3, 4});
  Tensor c = x.contiguous();
  EXPECT_TRUE(c.shares_storage_with(x));
  EXPECT_EQ(c.data_ptr(), x.data_ptr());
  Tensor tc = x.t().contiguous();
  EXPECT_FALSE(tc.shares_storage_with(x));
  EXPECT_TRUE(tc.is_contiguous());
  EXPECT_EQ(tc.strides(), (Shape{3, 1}));
  EXPECT_EQ(values(tc), values(x.t()));
  // A contiguous narrow (whole rows) with an offset is contiguous too.
  Tensor rows = x.narrow(0, 1, 2);
  EXPECT_TRUE(rows.contiguous().shares_storage_with(x));
}

TEST(TensorViews, CloneNeverShares) {
  Tensor x = iota({3, 4});
  for (const Tensor& src : {x, x.t(), x.narrow(1, 1, 2), x.expand({2, 3, 4})}) {
    Tensor c = src.clone();
    EXPECT_FALSE(c.shares_storage_with(x));
    EXPECT_EQ(c.shape(), src.shape());
    EXPECT_EQ(c.dtype(), src.dtype());
    EXPECT_EQ(values(c), values(src));
  }
  Tensor c = x.clone();
  c.fill_(5);
  EXPECT_EQ(x.at({0, 0}), 0.0);
  EXPECT_EQ(x.at({2, 3}), 11.0);
}

TEST(TensorViews, ToDTypeConverts) {
  Tensor f = tensor({1.7, -1.7, 2.5, -0.2, 0.0, 100.9});
  Tensor i = f.to(kInt32);
  EXPECT_EQ(i.dtype(), kInt32);
  EXPECT_FALSE(i.shares_storage_with(f));
  EXPECT_EQ(i.to_vector<int32_t>(), (std::vector<int32_t>{1, -1, 2, 0, 0, 100}));  // truncation toward 0
  EXPECT_EQ(f.to(kInt64).to_vector<int64_t>(), (std::vector<int64_t>{1, -1, 2, 0, 0, 100}));
  Tensor b = f.to(kBool);
  EXPECT_EQ(b.dtype(), kBool);
  EXPECT_EQ(b.to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1, 1, 0, 1}));  // -0.2 is true
  EXPECT_EQ(b.to(kFloat32).to_vector<float>(), (std::vector<float>{1, 1, 1, 1, 0, 1}));
  EXPECT_EQ(tensor({0, 255, 7}, kUInt8).to(kFloat64).to_vector<double>(), (std::vector<double>{0, 255, 7}));
  Tensor h = tensor({0.5, -2.0, 1024.0, 0.1}).to(kFloat16);
  EXPECT_EQ(h.dtype(), kFloat16);
  EXPECT_EQ(h.element_size(), 2);
  EXPECT_EQ(h.to(kFloat32).to_vector<float>(), (std::vector<float>{0.5f, -2.0f, 1024.0f, 0.0999755859375f}));
  Tensor bf = tensor({1.0, 0.1}).to(kBFloat16);
  EXPECT_EQ(bf.to(kFloat64).to_vector<double>(), (std::vector<double>{1.0, 0.10009765625}));
  // A strided source converts in its logical order.
  EXPECT_EQ(iota({2, 3}).t().to(kInt64).to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
}

TEST(TensorViews, ToSameDTypeOrDeviceIsIdentity) {
  Tensor x = iota({2, 2});
  EXPECT_TRUE(x.to(kFloat32).shares_storage_with(x));
  EXPECT_TRUE(x.to(x.device()).shares_storage_with(x));
}

// ----- in place -----

TEST(TensorViews, CopyBroadcastsAndConvertsIntoStridedView) {
  Tensor dst = zeros({4, 6}, kFloat64);
  Tensor even_cols = dst.slice(1, 0, 6, 2);  // [4, 3], strides [6, 2]
  const Tensor& ret = even_cols.copy_(tensor({1, 2, 3}, kInt32));
  EXPECT_TRUE(ret.shares_storage_with(dst));
  std::vector<double> row = {1, 0, 2, 0, 3, 0};
  std::vector<double> expected;
  for (int r = 0; r < 4; ++r) expected.insert(expected.end(), row.begin(), row.end());
  EXPECT_EQ(values(dst), expected);
}

TEST(TensorViews, CopyFromTransposedSource) {
  Tensor dst = zeros({3, 2}, kInt64);
  dst.copy_(iota({2, 3}).t());
  EXPECT_EQ(dst.to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  // Float source into int destination truncates.
  Tensor idst = zeros({3}, kInt32);
  idst.copy_(tensor({2.9, -2.9, 0.5}));
  EXPECT_EQ(idst.to_vector<int32_t>(), (std::vector<int32_t>{2, -2, 0}));
  // A column [3, 1] broadcast into a transposed destination.
  Tensor base = zeros({2, 3});
  base.t().copy_(tensor({7, 8, 9}, {3, 1}));
  EXPECT_EQ(values(base), (std::vector<double>{7, 8, 9, 7, 8, 9}));
}

TEST(TensorViews, CopyRejectsShapesThatDoNotBroadcast) {
  Tensor dst = zeros({2, 3});
  EXPECT_THROW(dst.copy_(zeros({4})), Error);
  EXPECT_THROW(dst.copy_(zeros({2, 3, 2})), Error);
  EXPECT_THROW(zeros({1, 3}).copy_(zeros({2, 3})), Error);  // the destination does not broadcast
}

TEST(TensorViews, AddInPlaceBroadcastsConvertsAndWritesStridedViews) {
  Tensor x = iota({2, 3});
  EXPECT_EQ(&x.add_(tensor({10.0, 20.0, 30.0}, {3}, {kFloat64})), &x);  // converted to float32, broadcast over rows
  EXPECT_EQ(x.dtype(), kFloat32);
  EXPECT_EQ(values(x), (std::vector<double>{10, 21, 32, 13, 24, 35}));
  Tensor y = iota({3, 4}, kInt64);
  y.t().narrow(0, 1, 2).add_(full({2, 3}, 100, {kInt64}));  // columns 1 and 2: a strided view
  EXPECT_EQ(values(y), (std::vector<double>{0, 101, 102, 3, 4, 105, 106, 7, 8, 109, 110, 11}));
  EXPECT_THROW(x.add_(zeros({4})), Error);  // does not broadcast to the destination
  EXPECT_THROW(zeros({1, 3}).add_(zeros({2, 3})), Error);
  Tensor w = zeros({3});
  w.requires_grad_();
  EXPECT_THROW(w.add_(ones({3})), Error);
  NoGradGuard no_grad;
  w.add_(ones({3}));
  EXPECT_EQ(values(w), (std::vector<double>{1, 1, 1}));
}

TEST(TensorViews, FillStridedViewLeavesOthersUntouched) {
  Tensor x = zeros({3, 4});
  x.select(1, 2).fill_(7);
  EXPECT_EQ(values(x), (std::vector<double>{0, 0, 7, 0, 0, 0, 7, 0, 0, 0, 7, 0}));
  Tensor y = iota({4, 4}, kInt64);
  y.t().slice(0, 1, 4, 2).narrow(1, 1, 2).fill_(-1);  // y[1:3, 1], y[1:3, 3]
  EXPECT_EQ(y.to_vector<int64_t>(),
            (std::vector<int64_t>{0, 1, 2, 3, 4, -1, 6, -1, 8, -1, 10, -1, 12, 13, 14, 15}));
  Tensor z = iota({5});
  z.zero_();
  EXPECT_EQ(values(z), (std::vector<double>(5, 0.0)));
  Tensor b = zeros({3}, kBool);
  b.narrow(0, 1, 1).fill_(true);
  EXPECT_EQ(b.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0}));
  Tensor fi = zeros({2}, kInt32);
  fi.fill_(3.7);  // converted to the tensor's dtype
  EXPECT_EQ(fi.to_vector<int32_t>(), (std::vector<int32_t>{3, 3}));
}

// ----- values -----

TEST(TensorViews, ViewsOfViewsKeepOffsets) {
  Tensor x = iota({4, 5});
  Tensor y = x.transpose(0, 1);  // [5, 4], strides [1, 5]
  Tensor z = y.narrow(0, 1, 2);  // [2, 4], strides [1, 5], offset 1
  EXPECT_EQ(z.offset(), 1);
  Tensor w = z.select(1, 2);     // [2], strides [1], offset 1 + 2 * 5
  EXPECT_EQ(w.shape(), (Shape{2}));
  EXPECT_EQ(w.strides(), (Shape{1}));
  EXPECT_EQ(w.offset(), 11);
  EXPECT_EQ(values(w), (std::vector<double>{11, 12}));  // x[2][1], x[2][2]
  EXPECT_EQ(values(y.narrow(0, 1, 2).select(1, 0)), (std::vector<double>{1, 2}));
  // Writes through the chain land on the right elements of the original.
  w.fill_(-1);
  EXPECT_EQ(x.at({2, 1}), -1.0);
  EXPECT_EQ(x.at({2, 2}), -1.0);
  EXPECT_EQ(x.at({2, 0}), 10.0);
  EXPECT_EQ(x.at({2, 3}), 13.0);
  EXPECT_EQ(x.at({1, 1}), 6.0);
}

TEST(TensorViews, DeepViewChainMatchesManualIndexing) {
  Tensor x = iota({2, 3, 4});
  // p[i][j][k] = x[j][k][i]; s = p[1:4:2] (i = 1, 3); v = s[:, :, -1] (k = 2).
  Tensor v = x.permute({2, 0, 1}).slice(0, 1, 4, 2).select(2, -1);
  ASSERT_EQ(v.shape(), (Shape{2, 2}));
  std::vector<double> expected;
  for (int64_t i : {1, 3})
    for (int64_t j = 0; j < 2; ++j) expected.push_back(static_cast<double>(j * 12 + 2 * 4 + i));
  EXPECT_EQ(values(v), expected);
  EXPECT_EQ(values(v.contiguous()), expected);
  EXPECT_EQ(values(v.clone()), expected);
  EXPECT_EQ(values(v.reshape({4})), expected);
  // An expand of a select of a view.
  Tensor e = x.select(1, 1).unsqueeze(1).expand({2, 3, 4});
  EXPECT_EQ(e.at({1, 2, 3}), x.at({1, 1, 3}));
  EXPECT_EQ(e.at({0, 0, 2}), x.at({0, 1, 2}));
}

// ----- creation -----

}  // namespace
}  // namespace ember
