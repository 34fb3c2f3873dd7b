// The kernels the op table's CUDA slots added beside the existing ones: the index check,
// gather and scatter_add (kernels/cuda/indexing.cuh), randint (random.cuh), select
// (elementwise.cuh) and the integer reductions (reducers.cuh), each against a host loop
// or the CPU backend.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "core/dispatch.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/indexing.cuh"
#include "kernels/cuda/random.cuh"
#include "kernels/cuda/reduce.cuh"
#include "tests/cuda/harness.h"

namespace ember::kernels::cuda {
namespace {

using namespace ember::kernels::cuda::test;

std::vector<double> doubles_of(const std::vector<int64_t>& v) { return std::vector<double>(v.begin(), v.end()); }

TEST(CudaIndexing, CheckRecordsABadIndexAndOnlyThen) {
  EMBER_NEED_DEVICE();
  for (int64_t n : kAwkwardSizes) {
    std::vector<int64_t> idx(n);
    for (int64_t i = 0; i < n; ++i) idx[i] = i % 5;
    DeviceArray<int64_t> good(idx, 1);
    DeviceArray<IndexError> err(std::vector<IndexError>{IndexError{}});
    check_indices(good.data(), n, 5, 1, int(IndexOp::kGather), err.data(), {});
    EXPECT_EQ(err.host()[0].claimed, 0u) << n;
    if (n == 0) continue;
    idx[n / 2] = n % 2 ? -1 : 5;
    DeviceArray<int64_t> bad(idx);
    check_indices(bad.data(), n, 5, 1, int(IndexOp::kScatterAdd), err.data(), {});
    const IndexError e = err.host()[0];
    EXPECT_EQ(e.claimed, 1u);
    EXPECT_EQ(e.op, int(IndexOp::kScatterAdd));
    EXPECT_EQ(e.value, idx[n / 2]);
    EXPECT_EQ(e.dim, 1);
    EXPECT_EQ(e.size, 5);
    EXPECT_EQ(e.position, n / 2);
  }
}

// The fused ops' check lets `skip` through (cross entropy's ignore_index) and records
// the position of a bad index.
TEST(CudaIndexing, CheckSkipsTheIgnoredValue) {
  EMBER_NEED_DEVICE();
  for (int64_t n : kAwkwardSizes) {
    if (n == 0) continue;
    std::vector<int64_t> idx(n);
    for (int64_t i = 0; i < n; ++i) idx[i] = i % 3 == 0 ? -100 : i % 5;
    DeviceArray<int64_t> ok(idx, 1);
    DeviceArray<IndexError> err(std::vector<IndexError>{IndexError{}});
    check_indices(ok.data(), n, 5, 0, int(IndexOp::kFusedCheck), err.data(), {}, true, -100);
    EXPECT_EQ(err.host()[0].claimed, 0u) << n;
    check_indices(ok.data(), n, 5, 0, int(IndexOp::kFusedCheck), err.data(), {});  // without skip: -100 is bad
    EXPECT_EQ(err.host()[0].claimed, 1u) << n;
    EXPECT_EQ(err.host()[0].value, -100) << n;
  }
}

TEST(CudaIndexing, GatherAlongEachDimOfAStridedInput) {
  EMBER_NEED_DEVICE();
  // in [4, 6, 5] with permuted strides (1, 20, 4) starting one element in, so that no
  // dim is contiguous and the pointer is not 16-byte aligned; index [4, 5, 5].
  const std::vector<double> vals = random_doubles(120, 3);
  DeviceArray<float> in(from_doubles<float>(vals), 1);
  const int64_t sizes[3] = {4, 6, 5}, strides[3] = {1, 20, 4};
  for (int dim = 0; dim < 3; ++dim) {
    int64_t isz[3] = {sizes[0], sizes[1] - 1, sizes[2]};
    const int64_t n = isz[0] * isz[1] * isz[2];
    std::vector<int64_t> idx(n);
    for (int64_t i = 0; i < n; ++i) idx[i] = (i * 7 + 3) % sizes[dim];
    DeviceArray<int64_t> index(idx);
    DeviceArray<float> out(n);
    gather(in.data(), index.data(), out.data(), make_layout({isz[0], isz[1], isz[2]}, {strides[0], strides[1], strides[2]}),
           dim, sizes[dim], {});
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) {
      int64_t c[3] = {i / (isz[1] * isz[2]), i / isz[2] % isz[1], i % isz[2]};
      c[dim] = idx[i];
      want[i] = double(float(vals[c[0] * strides[0] + c[1] * strides[1] + c[2] * strides[2]]));
    }
    EXPECT_TRUE(all_close(out.host(), want, 0.0)) << "dim " << dim;
  }
}

TEST(CudaIndexing, ScatterAddSumsInPositionOrderAndSkipsBadIndices) {
  EMBER_NEED_DEVICE();
  for (int64_t len : {int64_t(1), int64_t(7), int64_t(1023)}) {
    // self [3, 4] += src [len, 4] at rows index [len, 4] (dim 0); one index is bad.
    std::vector<int64_t> idx(len * 4);
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = (i * 5 + i / 3) % 3;
    idx[idx.size() / 2] = 3;
    const std::vector<double> src = random_doubles(len * 4, 9), self = random_doubles(12, 10);
    DeviceArray<float> y(from_doubles<float>(self), 1);
    DeviceArray<float> s(from_doubles<float>(src));
    DeviceArray<int64_t> index(idx);
    scatter_add(y.data(), make_layout({3, 4}, {4, 1}), index.data(), make_layout({len, 4}, {4, 1}), s.data(),
                make_layout({len, 4}, {4, 1}), 0, {});
    std::vector<float> want = from_doubles<float>(self);
    for (int64_t p = 0; p < len * 4; ++p)
      if (idx[p] < 3) want[idx[p] * 4 + p % 4] += float(src[p]);  // the CPU's serial order, in float
    EXPECT_TRUE(all_close(y.host(), std::vector<double>(want.begin(), want.end()), 0.0)) << "len " << len;
  }
}

TEST(CudaIndexing, RandintIsTheCpuDraw) {
  EMBER_NEED_DEVICE();
  for (int64_t n : kAwkwardSizes)
    for (auto [low, high] : {std::pair<int64_t, int64_t>{-3, 10}, {0, int64_t(1) << 40}}) {
      Tensor t = ember::empty({n}, kInt64);
      randint_stub(Device::cpu(), t, PhiloxState{77, 5}, double(low), double(high));
      DeviceArray<int64_t> d(n, 1);
      randint(d.data(), n, 77, 5, low, high);
      EXPECT_TRUE(all_close(d.host(), doubles_of(t.to_vector<int64_t>()), 0.0)) << n << " high " << high;
    }
}

TEST(CudaIndexing, SelectOverBroadcastOperands) {
  EMBER_NEED_DEVICE();
  const int64_t rows = 3, cols = 33;
  std::vector<bool> c(cols);
  for (int64_t j = 0; j < cols; ++j) c[j] = j % 3 == 0;
  DeviceArray<bool> cond(c, 1);
  const std::vector<double> a = random_doubles(rows * cols, 1), b = random_doubles(rows, 2);
  DeviceArray<double> da(a), db(b);
  DeviceArray<double> out(rows * cols);
  select(cond.data(), make_layout({rows, cols}, {0, 1}), da.data(), make_layout({rows, cols}, {cols, 1}), db.data(),
         make_layout({rows, cols}, {1, 0}), out.data(), make_layout({rows, cols}, {cols, 1}));
  std::vector<double> want(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) want[i] = c[i % cols] ? a[i] : b[i / cols];
  EXPECT_TRUE(all_close(out.host(), want, 0.0));
}

TEST(CudaIndexing, IntegerReductionsAreExact) {
  EMBER_NEED_DEVICE();
  for (int64_t n : {int64_t(1), int64_t(33), int64_t(4097), int64_t(100003)}) {
    std::vector<uint8_t> u(n);
    std::vector<int64_t> w(n);
    for (int64_t i = 0; i < n; ++i) {
      u[i] = uint8_t((i * 37 + 11) % 251);
      w[i] = (i * 7919) % 20011 - 10000 + (i == n / 3 ? (int64_t(1) << 40) : 0);
    }
    DeviceArray<uint8_t> du(u, 1);
    DeviceArray<int64_t> dw(w);
    DeviceArray<int64_t> sum_u(1), sum_w(1), arg(1);
    DeviceArray<uint8_t> max_u(1);
    DeviceArray<int64_t> min_w(1);
    DeviceArray<char> ws(1 << 20);  // more than any workspace these sizes need
    reduce_all(IntSumReduce<uint8_t>{}, du.data(), sum_u.data(), n, ws.data(), 1 << 20, {});
    EXPECT_EQ(sum_u.host()[0], std::accumulate(u.begin(), u.end(), int64_t(0))) << n;
    reduce_all(IntSumReduce<int64_t>{}, dw.data(), sum_w.data(), n, ws.data(), 1 << 20, {});
    EXPECT_EQ(sum_w.host()[0], std::accumulate(w.begin(), w.end(), int64_t(0))) << n;
    reduce_all(MaxReduce<uint8_t>{}, du.data(), max_u.data(), n, ws.data(), 1 << 20, {});
    EXPECT_EQ(max_u.host()[0], *std::max_element(u.begin(), u.end())) << n;
    reduce_all(ArgMinReduce<int64_t>{}, dw.data(), IndexedOut<int64_t>{min_w.data(), arg.data()}, n, ws.data(),
               1 << 20, {});
    const auto it = std::min_element(w.begin(), w.end());  // the first minimum
    EXPECT_EQ(min_w.host()[0], *it) << n;
    EXPECT_EQ(arg.host()[0], it - w.begin()) << n;
  }
}

}  // namespace
}  // namespace ember::kernels::cuda
