// The reduction kernels (kernels/cuda/reduce.cuh) against the CPU backend: sum, mean,
// amax, amin, argmax/argmin and var over the last dim, a middle dim, all elements, and
// the outer and inner dims around a kept one (no argmax there), on awkward sizes that take
// each launch path (warp per row, block per row, split in two passes), misaligned views,
// float32/float64/bfloat16/float16, NaN, and bad arguments.
//
// Two kinds of inputs:
// - small integers (in [-8, 8]): every sum is exact in float, so sum/max/min/argmax must
//   match the CPU bit for bit (a dropped or repeated element cannot hide in a tolerance),
//   and the many ties check "first index wins";
// - uniform reals: sums and variances within a rounding bound stated where it is used.
// (This file: exact results and launch plans; test_reduce_reals.cpp: reals.)

#include "tests/cuda/reduce_harness.h"

namespace ember::kernels::cuda {
namespace {

using namespace reduce_test;

TEST(CudaReduce, PlansCoverEveryPath) {
  EMBER_NEED_DEVICE();
  // The test sizes reach each path whatever the SM count (the emulator's 4, an H200's 132).
  auto plan = [](const Case& c) {
    return c.layout == reduce_test::Layout::kMiddle ? middle_dim_plan(c.outer, c.n, c.inner, 4, 16)
                                       : last_dim_plan(c.outer, c.n, 4, 16);
  };
  EXPECT_EQ(plan(last(4097, 1)).lanes_per_row, 1);  // 32 rows per warp
  EXPECT_EQ(plan(last(31, 32)).lanes_per_row, 8);
  EXPECT_EQ(plan(last(33, 33)).lanes_per_row, 16);
  EXPECT_EQ(plan(last(2, 1024)).lanes_per_row, 32);
  EXPECT_EQ(plan(last(3, 1025)).lanes_per_row, 0);  // a block per row
  EXPECT_EQ(plan(last(33, 2000)).splits, 1);  // a block per row, written directly
  EXPECT_GT(plan(last(3, 4097)).splits, 1);   // split rows: two passes
  // Rows that alone give every SM 8 blocks stay whole up to 128 KiB (one launch).
  EXPECT_EQ(last_dim_plan(int64_t(sm_count()) * 8, 32768, 4, 4).splits, 1);
  EXPECT_GT(last_dim_plan(int64_t(sm_count()) * 8, 32769, 4, 4).splits, 1);
  EXPECT_GT(last_dim_plan(int64_t(sm_count()) * 8 - 1, 32768, 4, 4).splits, 1);
  EXPECT_GT(plan(all(4097)).splits, 1);
  EXPECT_GT(plan(all(40001)).splits, 4);
  EXPECT_GT(plan(middle(1, 4097, 3)).splits, 1);
  EXPECT_TRUE(plan(middle(5, 7, 31)).thread_per_output);
  EXPECT_TRUE(plan(middle(33, 31, 4)).thread_per_output);
  EXPECT_FALSE(plan(middle(1, 1023, 32)).thread_per_output);
  EXPECT_EQ(plan(middle(2, 100, 5)).splits, 1);  // under kMinSegmentBytes a column tile
  EXPECT_EQ(plan(middle(3, 1023, 1)).lanes_per_row, 32);  // inner 1: the last dim
  EXPECT_EQ(plan(middle(2, 65, 33)).width, 32);  // two column tiles, the second one narrow
  EXPECT_EQ(plan(middle(2, 100, 5)).width, 5);
  // The 16-byte form: up to 8 threads (32 float columns) a row of the column tile; a
  // column tile of at most 128 KiB in a grid that fills the SMs is not split.
  EXPECT_EQ(middle_dim_plan(2, 100, 36, 4, 4, true).width, 8);  // 9 vectors: a tile of 8, one of 1
  EXPECT_EQ(middle_dim_plan(3, 300, 4, 4, 4, true).width, 1);
  EXPECT_EQ(middle_dim_plan(3, 300, 16, 2, 4, true).width, 2);  // bfloat16: 8 columns a thread
  const int64_t outer = sm_count();  // 8 column tiles a row of outer: 8 blocks an SM
  EXPECT_EQ(middle_dim_plan(outer, 1024, 256, 4, 4, true).splits, 1);
  EXPECT_EQ(middle_dim_plan(outer, 1024, 256, 4, 4, true).main.grid.x, unsigned(outer * 8));
  EXPECT_GT(middle_dim_plan(outer, 1025, 256, 4, 4, true).splits, 1);  // past 128 KiB a tile
  EXPECT_GT(middle_dim_plan(1, 4097, 8, 4, 4, true).splits, 1);
  EXPECT_FALSE(middle_dim_vec_ok(reinterpret_cast<const void*>(uintptr_t(4)), 1, 100, 8, 4));
  EXPECT_FALSE(middle_dim_vec_ok(nullptr, 1, 100, 6, 4));
  EXPECT_FALSE(middle_dim_vec_ok(nullptr, 1, 100, 16, 1));
  EXPECT_FALSE(middle_dim_vec_ok(nullptr, 1 << 16, 1 << 12, 8, 4));  // 2^31 elements: 32-bit indices no more
  EXPECT_TRUE(middle_dim_vec_ok(nullptr, 1, 100, 8, 2));
  // Every plan covers its reduced dim once, and asks for workspace only when it splits.
  for (const auto* cases : {&last_dim_cases(), &middle_dim_cases(), &all_cases()})
    for (const Case& c : *cases) {
      const ReducePlan p = plan(c);
      if (c.outputs() == 0 || p.thread_per_output || p.lanes_per_row > 0) continue;
      EXPECT_GE(p.splits * p.segment, c.n) << c.str();
      EXPECT_LT((p.splits - 1) * p.segment, std::max<int64_t>(c.n, 1)) << c.str();
      EXPECT_EQ(p.workspace_bytes > 0, p.splits > 1) << c.str();
      EXPECT_GT(p.main.grid.x, 0u) << c.str();
    }
  // A billion floats on an H200-sized device split into few enough blocks to merge fast.
  const ReducePlan big = last_dim_plan(1, int64_t(1) << 30, 4, 4);
  EXPECT_LE(big.splits, int64_t(sm_count()) * 16);
}

// How a backend maps a DimMask over a contiguous tensor onto [outer, n, inner].
TEST(CudaReduce, AdjacentReducedDimsMergeIntoOuterNInner) {
  EMBER_NEED_DEVICE();
  auto dims_of = [](const Shape& sizes, std::vector<int> reduced) {
    uint64_t mask = 0;
    for (int d : reduced) mask |= uint64_t(1) << d;
    ReduceDims d{-1, -1, -1};
    const bool ok = reduce_dims(sizes, mask, d);
    return ok ? std::vector<int64_t>{d.outer, d.n, d.inner} : std::vector<int64_t>{};
  };
  using V = std::vector<int64_t>;
  EXPECT_EQ(dims_of({2, 3, 4}, {1}), (V{2, 3, 4}));
  EXPECT_EQ(dims_of({2, 3, 4}, {2}), (V{6, 4, 1}));         // the last dim
  EXPECT_EQ(dims_of({2, 3, 4}, {0}), (V{1, 2, 12}));        // the first dim
  EXPECT_EQ(dims_of({2, 3, 4}, {1, 2}), (V{2, 12, 1}));
  EXPECT_EQ(dims_of({2, 3, 4}, {0, 1, 2}), (V{1, 24, 1}));  // all
  EXPECT_EQ(dims_of({2, 3, 4}, {0, 2}), V{});               // not adjacent
  EXPECT_EQ(dims_of({2, 1, 3, 4}, {0, 2}), (V{1, 6, 4}));   // adjacent past a size-1 dim
  EXPECT_EQ(dims_of({5, 1, 1}, {1, 2}), (V{5, 1, 1}));      // only size-1 dims reduced
  EXPECT_EQ(dims_of({2, 0, 4}, {1}), (V{2, 0, 4}));
  EXPECT_EQ(dims_of({}, {}), (V{1, 1, 1}));                 // a 0-dim tensor
}

TEST(CudaReduce, LastDimOfIntegersMatchesCpuExactly) {
  EMBER_NEED_DEVICE();
  const auto t0 = std::chrono::steady_clock::now();
  uint32_t seed = 1;
  for (const Case& c : last_dim_cases()) {
    check_exact<float>(c, seed % 2, seed);  // offset 1: rows start off 16-byte boundaries
    check_exact<__nv_bfloat16>(c, 3, seed++);
  }
  for (const Case& c : {last(33, 33), last(3, 1025), last(3, 4097)}) {
    check_exact<double>(c, 1, seed++);
    check_exact<__half>(c, 5, seed++);
  }
  std::printf("last dim: %.2f s\n", seconds_since(t0));
}

TEST(CudaReduce, MiddleDimOfIntegersMatchesCpuExactly) {
  EMBER_NEED_DEVICE();
  const auto t0 = std::chrono::steady_clock::now();
  uint32_t seed = 100;
  for (const Case& c : middle_dim_cases()) {
    check_exact<float>(c, seed % 2, seed);
    if (seed++ % 3 == 0) check_exact<__nv_bfloat16>(c, 1, seed);
  }
  for (const Case& c : {middle(2, 33, 5), middle(1, 4097, 3), middle(2, 32, 33)}) {
    check_exact<double>(c, 1, seed++);
    check_exact<__half>(c, 0, seed++);
  }
  std::printf("middle dim: %.2f s\n", seconds_since(t0));
}

// The 16-byte middle-dim form (rows on 16-byte boundaries) beside the scalar one on the
// same shapes (offsets that break the alignment): inner dims of one vector, of a partial
// column tile (36: 9 vectors), whole tiles over several turns, split columns, 1-long dims.
TEST(CudaReduce, MiddleDimVectorFormMatchesCpuExactly) {
  EMBER_NEED_DEVICE();
  const auto t0 = std::chrono::steady_clock::now();
  uint32_t seed = 900;
  for (const Case& c : {middle(1, 65, 4), middle(3, 100, 8), middle(2, 1023, 36), middle(1, 4097, 8),
                        middle(3, 300, 64), middle(2, 65, 256), middle(1, 130, 260), middle(33, 65, 4)}) {
    check_exact<float>(c, 0, seed++);   // the 16-byte form
    check_exact<float>(c, 4, seed++);   // 16 bytes past the boundary: still aligned
    check_exact<float>(c, 2, seed++);   // misaligned: the scalar form
    if (c.inner % 8 == 0) check_exact<__nv_bfloat16>(c, 8, seed++);
    if (c.inner % 8 == 0) check_exact<__half>(c, 0, seed++);
    check_exact<double>(c, 2, seed++);
  }
  for (const Case& c : {middle(3, 100, 6), middle(2, 65, 2)}) {  // inner not a multiple of 4 floats
    check_exact<float>(c, 0, seed++);
    check_exact<double>(c, 0, seed++);  // but of 2 doubles: the 16-byte form
  }
  std::printf("middle dim, 16-byte form: %.2f s\n", seconds_since(t0));
}

TEST(CudaReduce, AllElementsOfIntegersMatchesCpuExactly) {
  EMBER_NEED_DEVICE();
  const auto t0 = std::chrono::steady_clock::now();
  uint32_t seed = 200;
  for (const Case& c : all_cases()) {
    check_exact<float>(c, 0, seed++);
    check_exact<float>(c, 1, seed++);
    check_exact<__nv_bfloat16>(c, 7, seed++);
  }
  for (const Case& c : {all(33), all(4097)}) {
    check_exact<double>(c, 1, seed++);
    check_exact<__half>(c, 1, seed++);
  }
  std::printf("all: %.2f s\n", seconds_since(t0));
}

// The outer and inner dims of [outer, n, inner] (a conv's bias gradient over N and H * W):
// the shortcuts (outer 1, inner 1, empty), warp-per-row, block-per-row and split rows in
// the first pass, conv-like shapes (7x7 and 14x14 maps), rows off 16-byte boundaries.
const std::vector<Case>& outer_inner_cases() {
  static const std::vector<Case> cases = {
      outer_inner(0, 3, 2),    outer_inner(2, 0, 3),   outer_inner(3, 5, 0),    outer_inner(1, 7, 33),
      outer_inner(5, 7, 1),    outer_inner(3, 4, 33),  outer_inner(33, 31, 4),  outer_inner(4, 3, 1025),
      outer_inner(2, 3, 4097), outer_inner(65, 33, 31), outer_inner(128, 8, 49), outer_inner(9, 16, 196)};
  return cases;
}

TEST(CudaReduce, OuterInnerOfIntegersMatchesCpuExactly) {
  EMBER_NEED_DEVICE();
  const auto t0 = std::chrono::steady_clock::now();
  uint32_t seed = 700;
  for (const Case& c : outer_inner_cases()) {
    check_exact<float>(c, seed % 2, seed);
    check_exact<__nv_bfloat16>(c, 3, seed++);
  }
  for (const Case& c : {outer_inner(3, 4, 33), outer_inner(2, 3, 4097), outer_inner(128, 8, 49)}) {
    check_exact<double>(c, 1, seed++);
    check_exact<__half>(c, 5, seed++);
  }
  // The first pass's plans: a warp per row, a block per row, split rows.
  EXPECT_EQ(last_dim_plan(128 * 8, 49, 4, 4).lanes_per_row, 16);
  EXPECT_EQ(last_dim_plan(4 * 3, 1025, 4, 4).lanes_per_row, 0);
  EXPECT_GT(last_dim_plan(2 * 3, 4097, 4, 4).splits, 1);
  std::printf("outer and inner: %.2f s\n", seconds_since(t0));
}

}  // namespace
}  // namespace ember::kernels::cuda
