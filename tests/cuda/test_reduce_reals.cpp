// The reduction kernels (kernels/cuda/reduce.cuh) on reals: sums, means and variances
// within rounding bounds derived below, NaN propagation, deterministic split reductions,
// shared memory reused by blocks taking several rows, and bad arguments. The harness and
// the exact tests on integers: reduce_harness.h, test_reduce.cpp.

#include "tests/cuda/reduce_harness.h"

namespace ember::kernels::cuda {
namespace {

using namespace reduce_test;


// Rounding of sums and variances of reals. A sum whose longest chain of additions is d
// has |error| <= d u sum|x| (Higham, Accuracy and Stability, 4.3), u the compute type's
// unit roundoff. Here d <= n/8 + 64: a thread's run down a column (ny >= 8 rows) or along
// a row, plus the trees of warp, block and merge. The CPU sums in double and rounds once,
// and so does the kernel: 2 u_T |want| more. The same bound with sum x^2 (the size of the
// squared deviations, times 3 for the mean's own error) bounds m2, hence var.
template <class T>
void check_rounding(const Case& c, size_t offset, uint32_t seed) {
  SCOPED_TRACE(c.str() + " at offset " + std::to_string(offset) + ", " + std::string(dtype_name(dtype_for<T>())));
  Input<T> in(c, test::random_doubles(size_t(c.numel()), seed, -2.0, 3.0), offset);
  const auto dims = c.dims();
  const double u = test::compute_roundoff<T>(), uT = test::unit_roundoff<T>(), d = double(c.count()) / 8 + 64;
  const Tensor x64 = in.cpu.to(kFloat64);
  const std::vector<double> abs_sum = cpu_values(ember::sum(ember::abs(x64), dims));
  const std::vector<double> sq_sum = cpu_values(ember::sum(ember::mul(x64, x64), dims));
  {
    DeviceArray<T> out(c.outputs());
    run(SumReduce<T>{}, c, in.device.data(), out.data());
    const auto want = cpu_values(ember::sum(in.cpu, dims));
    std::vector<double> tol(want.size());
    for (size_t i = 0; i < tol.size(); ++i) tol[i] = d * u * abs_sum[i] + 2 * uT * std::abs(want[i]) + 1e-300;
    EXPECT_TRUE(within(out.host(), want, tol)) << "sum";
  }
  {
    DeviceArray<T> out(c.outputs());
    run(MeanReduce<T>{}, c, in.device.data(), out.data());
    const auto want = cpu_values(ember::mean(in.cpu, dims));  // CPU: sum rounded, then divided: 3 u_T
    std::vector<double> tol(want.size());
    for (size_t i = 0; i < tol.size(); ++i)
      tol[i] = d * u * abs_sum[i] / double(c.count()) + 4 * uT * std::abs(want[i]) + 1e-300;
    EXPECT_TRUE(within(out.host(), want, tol)) << "mean";
  }
  for (int64_t correction : {0, 1, 2}) {
    if (c.count() <= correction) continue;  // VarEdgeCases
    DeviceArray<T> out(c.outputs());
    run(VarReduce<T>{correction}, c, in.device.data(), out.data());
    const auto want = cpu_values(ember::var(in.cpu, dims, correction));
    std::vector<double> tol(want.size());
    for (size_t i = 0; i < tol.size(); ++i)
      tol[i] = 3 * d * u * sq_sum[i] / double(c.count() - correction) + 2 * uT * std::abs(want[i]) + 1e-300;
    EXPECT_TRUE(within(out.host(), want, tol)) << "var, correction " << correction;
  }
}

TEST(CudaReduce, SumMeanVarOfRealsWithinRoundingBounds) {
  EMBER_NEED_DEVICE();
  const auto t0 = std::chrono::steady_clock::now();
  uint32_t seed = 300;
  for (const Case& c : {last(1, 1), last(31, 32), last(33, 33), last(9, 1023), last(3, 1025), last(33, 2000),
                        last(3, 4097), middle(3, 31, 1), middle(2, 33, 5), middle(2, 32, 33), middle(1, 4097, 3),
                        all(2), all(1023), all(40001)}) {
    check_rounding<float>(c, 1, seed++);
    check_rounding<__nv_bfloat16>(c, 0, seed++);
  }
  for (const Case& c : {outer_inner(3, 4, 33), outer_inner(4, 3, 1025), outer_inner(2, 3, 4097), outer_inner(128, 8, 49)}) {
    check_rounding<float>(c, 1, seed++);
    check_rounding<__nv_bfloat16>(c, 0, seed++);
    check_rounding<__half>(c, 3, seed++);
  }
  for (const Case& c : {last(33, 33), last(3, 4097), middle(1, 4097, 3), all(40001), outer_inner(128, 8, 49)})
    check_rounding<double>(c, 1, seed++);
  // The 16-byte middle-dim form (offset 0), its split columns and partial tiles.
  for (const Case& c : {middle(2, 1023, 36), middle(1, 4097, 8), middle(3, 300, 64)}) {
    check_rounding<float>(c, 0, seed++);
    check_rounding<__nv_bfloat16>(c, 0, seed++);
    check_rounding<double>(c, 0, seed++);
  }
  std::printf("reals: %.2f s\n", seconds_since(t0));
}

// Variance is shift-invariant; Welford with Chan's merge keeps that: data with a large
// mean (1e4 + U(-1, 1): E[x^2] - E[x]^2 would lose every digit in float) still gives
// the variance to float accuracy, relative to the variance itself.
TEST(CudaReduce, VarOfDataFarFromZeroKeepsItsDigits) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 400;
  for (const Case& c : {last(3, 1025), last(5, 100), middle(2, 4097, 3), all(40001)}) {
    SCOPED_TRACE(c.str());
    Input<float> in(c, test::random_doubles(size_t(c.numel()), seed++, 1e4 - 1, 1e4 + 1), 1);
    DeviceArray<float> out(c.outputs());
    run(VarReduce<float>{1}, c, in.device.data(), out.data());
    // Reference in float64 from the same float values. Each value carries its own
    // rounding (fine: the reference uses the rounded values); the kernel's error is a few
    // hundred float ulps of the *mean* spread over n: about 1e-3 relative here at worst,
    // where E[x^2] - E[x]^2 in float would be off by 100% or more.
    const auto want = cpu_values(ember::var(in.cpu.to(kFloat64), c.dims(), 1));
    EXPECT_TRUE(all_close(out.host(), want, 2e-3));
  }
}

TEST(CudaReduce, VarEdgeCasesFollowPyTorch) {
  EMBER_NEED_DEVICE();
  // torch.var divides by max(n - correction, 0): n <= correction gives inf (or NaN when
  // every value is equal, 0/0); n == 0 gives NaN. ember's CPU var follows the same rule.
  const std::vector<float> x = {1.0f, 3.0f, 3.0f, 3.0f};
  DeviceArray<float> dx(x, 1);
  DeviceArray<float> out(1);
  auto var_of = [&](int64_t n, int64_t correction) {
    run(VarReduce<float>{correction}, all(n), dx.data(), out.data());
    return out.host()[0];
  };
  EXPECT_FLOAT_EQ(var_of(2, 0), 1.0f);
  EXPECT_FLOAT_EQ(var_of(2, 1), 2.0f);
  EXPECT_EQ(var_of(2, 2), INFINITY);
  EXPECT_EQ(var_of(2, 5), INFINITY);
  EXPECT_TRUE(std::isnan(var_of(1, 1)));  // one element: m2 = 0, 0/0
  EXPECT_EQ(var_of(1, 0), 0.0f);
  EXPECT_TRUE(std::isnan(var_of(0, 1)));
  EXPECT_TRUE(std::isnan(var_of(0, 0)));
  EXPECT_FLOAT_EQ(var_of(4, 1), 1.0f);  // mean 2.5, m2 = 2.25 + 3 * 0.25 = 3, over 3
  // An empty reduction per output: sum 0, mean NaN, var NaN.
  DeviceArray<float> rows(3);
  run(VarReduce<float>{1}, last(3, 0), dx.data(), rows.data());
  for (float v : rows.host()) EXPECT_TRUE(std::isnan(v));
}

// NaN anywhere makes sum, mean, var, max and min NaN, and argmax/argmin point at the first
// NaN, as on the CPU. Infinities: the max of -inf values is at index 0.
TEST(CudaReduce, NanPropagatesAndArgmaxFindsTheFirstNan) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 500;
  for (const Case& c : {last(4, 33), last(3, 1025), last(2, 4097), middle(2, 37, 3), middle(1, 4097, 2), all(40001)}) {
    for (int64_t where : {int64_t(0), c.n / 2, c.n - 1}) {
      SCOPED_TRACE(c.str() + ", NaN at " + std::to_string(where));
      std::vector<double> v = small_integers(size_t(c.numel()), seed++);
      // Output 0 gets a NaN at `where` and a second one later; the last output, if any
      // other, has none.
      auto at = [&](int64_t k) { return size_t(k * c.inner); };  // output 0 (outer 0, column 0)
      v[at(where)] = NAN;
      if (where + 3 < c.n) v[at(where + 3)] = NAN;
      Input<float> in(c, v, 1);
      const auto dims = c.dims();
      const int64_t m = c.outputs();
      DeviceArray<float> s(m), mean(m), var(m), hi(m), lo(m), vals(m);
      DeviceArray<int64_t> idx(m), idx_min(m);
      run(SumReduce<float>{}, c, in.device.data(), s.data());
      run(MeanReduce<float>{}, c, in.device.data(), mean.data());
      run(VarReduce<float>{1}, c, in.device.data(), var.data());
      run(MaxReduce<float>{}, c, in.device.data(), hi.data());
      run(MinReduce<float>{}, c, in.device.data(), lo.data());
      run(ArgMaxReduce<float>{}, c, in.device.data(), IndexedOut<float>{vals.data(), idx.data()});
      run(ArgMinReduce<float>{}, c, in.device.data(), IndexedOut<float>{nullptr, idx_min.data()});
      EXPECT_TRUE(std::isnan(s.host()[0]) && std::isnan(mean.host()[0]) && std::isnan(var.host()[0]));
      EXPECT_TRUE(all_close(s.host(), cpu_values(ember::sum(in.cpu, dims)), 0.0));
      EXPECT_TRUE(all_close(hi.host(), cpu_values(ember::amax(in.cpu, dims)), 0.0));
      EXPECT_TRUE(all_close(lo.host(), cpu_values(ember::amin(in.cpu, dims)), 0.0));
      EXPECT_EQ(idx.host()[0], where);
      EXPECT_EQ(idx_min.host()[0], where);
      EXPECT_TRUE(std::isnan(vals.host()[0]));
      const Tensor want = c.layout == reduce_test::Layout::kAll ? ember::argmax(in.cpu) : ember::argmax(in.cpu, 1);
      EXPECT_TRUE(all_close(idx.host(), cpu_values(want), 0.0));
    }
  }
  // All -inf: the first one; +inf beats every number.
  const std::vector<float> ninf(70, -INFINITY);
  DeviceArray<float> dn(ninf, 1);
  DeviceArray<int64_t> i1(2);
  run(ArgMaxReduce<float>{}, last(2, 35), dn.data(), IndexedOut<float>{nullptr, i1.data()});
  EXPECT_EQ(i1.host(), (std::vector<int64_t>{0, 0}));
  std::vector<float> pinf(2000, 1.0f);
  pinf[1500] = INFINITY;
  pinf[1700] = INFINITY;
  DeviceArray<float> dp(pinf);
  DeviceArray<int64_t> i2(1);
  run(ArgMaxReduce<float>{}, all(2000), dp.data(), IndexedOut<float>{nullptr, i2.data()});
  EXPECT_EQ(i2.host()[0], 1500);
}

// The same input gives the same bits on every run (no atomics; fixed merge order).
TEST(CudaReduce, SplitReductionsAreDeterministic) {
  EMBER_NEED_DEVICE();
  const Case c = all(40001);
  Input<float> in(c, test::random_doubles(size_t(c.n), 600), 1);
  DeviceArray<float> a(1), b(1);
  run(SumReduce<float>{}, c, in.device.data(), a.data());
  run(SumReduce<float>{}, c, in.device.data(), b.data());
  const float x = a.host()[0], y = b.host()[0];
  EXPECT_EQ(std::memcmp(&x, &y, sizeof(float)), 0);
}

// The outputs of two launches of reducer R, `want` and `got` (values, and for argmax and
// argmin the indices), and their comparison: exact (the inputs are integers, exact in any
// order), but var within 1e-5 (Welford states merged in another order: a few roundings
// of a variance near 27 apart).
template <class R>
struct TwoOutputs {
  using Out = typename R::Out;
  static constexpr bool kIndexed = std::is_same_v<Out, IndexedOut<float>>;
  DeviceArray<float> want, got;
  DeviceArray<int64_t> want_idx, got_idx;
  explicit TwoOutputs(int64_t m) : want(m), got(m), want_idx(m), got_idx(m) {}
  Out want_out() { return out(want, want_idx); }
  Out got_out() { return out(got, got_idx); }
  static Out out(DeviceArray<float>& v, DeviceArray<int64_t>& i) {
    if constexpr (kIndexed) return Out{v.data(), i.data()};
    else return v.data();
  }
  void expect_same() {
    if constexpr (std::is_same_v<R, VarReduce<float>>) {
      const std::vector<float> w = want.host();
      EXPECT_TRUE(all_close(got.host(), std::vector<double>(w.begin(), w.end()), 1e-5));
    } else {
      EXPECT_EQ(got.host(), want.host());
    }
    if constexpr (kIndexed) {
      EXPECT_EQ(got_idx.host(), want_idx.host());
    }
  }
};

// The block-per-row and middle-dim kernels stride over their work by the grid, but the
// host launcher gives every row (tile) a block of its own; with a grid of two blocks each
// block reduces several, reusing block_merge's and the column tree's shared memory: the
// barriers before that reuse are exercised here (and by the emulator's racecheck).
template <class R>
void check_several_turns(const R& r, uint32_t seed) {
  const LaunchConfig two_blocks{dim3(2), dim3(kBlockThreads), 0};
  for (const Case& c : {last(7, 1500), middle(3, 300, 40)}) {
    SCOPED_TRACE(c.str());
    Input<float> in(c, small_integers(size_t(c.numel()), seed++), 1);
    TwoOutputs<R> o(c.outputs());
    run(r, c, in.device.data(), o.want_out());
    if (c.layout == reduce_test::Layout::kLast)
      launch<reduce_last_dim_kernel<R, false>>(two_blocks, nullptr, r, in.device.data(), o.got_out(), nullptr,
                                               c.outer, c.n, int64_t(1), c.n, 0);
    else
      launch<reduce_middle_dim_kernel<R, false>>(two_blocks, nullptr, r, in.device.data(), o.got_out(), nullptr,
                                                 c.outer, c.n, c.inner, 32, int64_t(1), c.n, c.n);
    test::synchronize();
    o.expect_same();  // var: the launcher splits the middle-dim columns
  }
}

// The 16-byte middle-dim form over several column tiles a block (and, for argmax and var,
// several merge rounds a tile: 2 columns of states at a time).
template <class R>
void check_vec_several_turns(const R& r, uint32_t seed) {
  const Case c = middle(3, 300, 72);  // 18 vectors: tiles of 8, 8 and 2 a row of outer
  Input<float> in(c, small_integers(size_t(c.numel()), seed), 0);
  TwoOutputs<R> o(c.outputs());
  launch<reduce_middle_dim_kernel<R, false>>(LaunchConfig{dim3(9), dim3(kBlockThreads), 0}, nullptr, r,
                                             in.device.data(), o.want_out(), nullptr, c.outer, c.n, c.inner, 8,
                                             int64_t(1), c.n, c.n);
  launch<reduce_middle_dim_vec_kernel<R>>(LaunchConfig{dim3(2), dim3(kBlockThreads), 0}, nullptr, r,
                                          in.device.data(), o.got_out(), nullptr, c.outer, c.n, c.inner, 8,
                                          int64_t(1), c.n);
  test::synchronize();
  o.expect_same();  // var: the same tree shape, other chunks
}

TEST(CudaReduce, BlocksThatTakeSeveralRowsReuseTheirSharedMemory) {
  EMBER_NEED_DEVICE();
  check_several_turns(SumReduce<float>{}, 700);      // block_reduce
  check_several_turns(ArgMaxReduce<float>{}, 710);   // block_merge of {value, index}
  check_several_turns(VarReduce<float>{1}, 720);     // block_merge of a Welford state
  check_vec_several_turns(SumReduce<float>{}, 730);
  check_vec_several_turns(ArgMaxReduce<float>{}, 740);
  check_vec_several_turns(VarReduce<float>{1}, 750);
}

// The same input gives the same bits on every run in the 16-byte middle-dim form too,
// split or not.
TEST(CudaReduce, MiddleDimVectorFormIsDeterministic) {
  EMBER_NEED_DEVICE();
  for (const Case& c : {middle(1, 4097, 8), middle(2, 1023, 36)}) {
    Input<float> in(c, test::random_doubles(size_t(c.numel()), 610), 0);
    DeviceArray<float> a(c.outputs()), b(c.outputs());
    run(SumReduce<float>{}, c, in.device.data(), a.data());
    run(SumReduce<float>{}, c, in.device.data(), b.data());
    const std::vector<float> x = a.host(), y = b.host();
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << c.str();
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CudaReduce, BadArgumentsRaise) {
  EMBER_NEED_DEVICE();
  DeviceArray<float> x(8192), out(4);
  DeviceArray<int64_t> idx(4);
  auto has = [](const std::string& err, const char* what) {
    return err.find(what) != std::string::npos ? ::testing::AssertionSuccess()
                                               : ::testing::AssertionFailure() << "\"" << err << "\" lacks \"" << what << "\"";
  };
  EXPECT_TRUE(has(error_of([&] { reduce_last_dim(MaxReduce<float>{}, x.data(), out.data(), 2, 0, nullptr, 0, nullptr); }),
                  "amax): cannot reduce over 0 elements"));
  EXPECT_TRUE(has(error_of([&] {
                    reduce_middle_dim(ArgMaxReduce<float>{}, x.data(), IndexedOut<float>{nullptr, idx.data()}, 2, 0, 2,
                                      nullptr, 0, nullptr);
                  }),
                  "argmax): cannot reduce over 0 elements"));
  EXPECT_TRUE(has(error_of([&] { reduce_all(ArgMinReduce<float>{}, x.data(), IndexedOut<float>{}, 5, nullptr, 0, nullptr); }),
                  "indices output is null"));
  EXPECT_TRUE(has(error_of([&] { reduce_last_dim(SumReduce<float>{}, x.data(), out.data(), -1, 5, nullptr, 0, nullptr); }),
                  "negative size"));
  EXPECT_TRUE(has(error_of([&] { reduce_middle_dim(SumReduce<float>{}, x.data(), out.data(), 2, 3, -2, nullptr, 0, nullptr); }),
                  "negative size"));
  EXPECT_TRUE(has(error_of([&] { reduce_all(SumReduce<float>{}, x.data(), static_cast<float*>(nullptr), 5, nullptr, 0, nullptr); }),
                  "output is null"));
  EXPECT_TRUE(has(error_of([&] { reduce_all(SumReduce<float>{}, static_cast<float*>(nullptr), out.data(), 5, nullptr, 0, nullptr); }),
                  "input is null"));
  EXPECT_TRUE(has(error_of([&] { reduce_all(VarReduce<float>{-1}, x.data(), out.data(), 5, nullptr, 0, nullptr); }),
                  "correction must be >= 0, got -1"));
  // A split reduction without its workspace, or with too little.
  const size_t need = reduce_all_workspace<SumReduce<float>>(8192);
  ASSERT_GT(need, 0u);
  DeviceArray<unsigned char> ws(need);
  EXPECT_TRUE(has(error_of([&] { reduce_all(SumReduce<float>{}, x.data(), out.data(), 8192, nullptr, 0, nullptr); }),
                  "bytes of workspace"));
  EXPECT_TRUE(has(error_of([&] { reduce_all(SumReduce<float>{}, x.data(), out.data(), 8192, ws.data(), need - 1, nullptr); }),
                  "bytes of workspace"));
  const size_t need_oi = reduce_outer_inner_workspace<SumReduce<float>>(4, 2, 1024);
  ASSERT_GT(need_oi, 0u);
  DeviceArray<unsigned char> ws_oi(need_oi);
  EXPECT_TRUE(has(error_of([&] {
                    reduce_outer_inner(SumReduce<float>{}, x.data(), out.data(), 4, 2, 1024, ws_oi.data(), need_oi - 1,
                                       nullptr);
                  }),
                  "bytes of workspace"));
  // Nothing to compute: no outputs, whatever the reduced length.
  EXPECT_EQ(error_of([&] { reduce_last_dim(MaxReduce<float>{}, x.data(), out.data(), 0, 0, nullptr, 0, nullptr); }), "");
  EXPECT_EQ(error_of([&] { reduce_middle_dim(MaxReduce<float>{}, x.data(), out.data(), 3, 5, 0, nullptr, 0, nullptr); }), "");
}


}  // namespace
}  // namespace ember::kernels::cuda
