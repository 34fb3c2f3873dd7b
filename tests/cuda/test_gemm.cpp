// The GEMM kernels (kernels/cuda/sgemm.cuh, gemm_bf16.cuh) against a float64 reference:
// every SGEMM version in every layout on awkward sizes, alpha/beta, misaligned leading
// dimensions and bases, batches; the same for the bf16 tensor-core GEMM (in the emulator
// its mma.sync, ldmatrix and cp.async are models, see gemm_bf16.cuh: there the test checks
// everything around them; on a GPU, the PTX too).
//
// Tolerance: each output is a sum of k products accumulated in float32. With unit
// roundoff u (2^-24 for float32), a recursive sum of k terms plus the alpha/beta epilogue
// errs by at most about (k + 3) u (|alpha| sum_k |a b| + |beta| |c|) (Higham, Accuracy and
// Stability, 3.1), so the test allows (k + 4) u times that per element: proportional to
// the magnitudes actually summed, tight enough that one dropped or repeated term (about
// |a b| ~ 0.25 on average, against k u sum|a b| ~ 1e-4 here) fails. bf16 inputs are
// rounded first and the reference uses the rounded values, so only the accumulation
// counts; a bf16 C adds its own rounding, 2^-8 |c|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <sstream>

#if !defined(__CUDACC__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "kernels/cuda/gemm_bf16.cuh"
#include "kernels/cuda/sgemm.cuh"
#include "tests/cuda/harness.h"

namespace ember::kernels::cuda {
namespace {

using test::DeviceArray;

// Operand memory. In the emulator build an operand's last element ends at most 15 bytes
// before a page the process may not touch, so a kernel that reads or writes past the end
// of an operand crashes the test instead of quietly using a neighbour's bytes; bytes are
// 0xFF (NaN) until written, as in DeviceArray, which the GPU build uses (compute-sanitizer
// finds such accesses there).
#if defined(__CUDACC__)
template <class T>
using GuardedArray = DeviceArray<T>;
#else
template <class T>
class GuardedArray {
 public:
  GuardedArray(const std::vector<T>& values, size_t offset) : n_(values.size()) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t data_bytes = (n_ * sizeof(T) + 15) / 16 * 16 + (offset > 0 ? 16 : 0);
    map_bytes_ = (data_bytes + page - 1) / page * page + page;
    map_ = static_cast<unsigned char*>(
        mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EMBER_CHECK(map_ != MAP_FAILED, "GuardedArray: mmap of ", map_bytes_, " bytes failed");
    unsigned char* guard = map_ + map_bytes_ - page;
    EMBER_CHECK(mprotect(guard, page, PROT_NONE) == 0, "GuardedArray: mprotect failed");
    std::memset(map_, 0xFF, map_bytes_ - page);
    data_ = reinterpret_cast<T*>(guard - data_bytes) + offset;
    if (n_ > 0) std::memcpy(static_cast<void*>(data_), values.data(), n_ * sizeof(T));
  }
  GuardedArray(const GuardedArray&) = delete;
  GuardedArray& operator=(const GuardedArray&) = delete;
  ~GuardedArray() { munmap(map_, map_bytes_); }
  T* data() const { return data_; }
  void upload(const std::vector<T>& values) {
    EMBER_CHECK(values.size() == n_, "GuardedArray::upload: wrong size");
    if (n_ > 0) std::memcpy(static_cast<void*>(data_), values.data(), n_ * sizeof(T));
  }
  std::vector<T> host() const {
    std::vector<T> out(n_);
    if (n_ > 0) std::memcpy(static_cast<void*>(out.data()), data_, n_ * sizeof(T));
    return out;
  }

 private:
  size_t n_, map_bytes_ = 0;
  unsigned char* map_ = nullptr;
  T* data_ = nullptr;
};
#endif

struct Case {
  int64_t m, n, k;
  bool ta = false, tb = false;
  float alpha = 1.0f, beta = 0.0f;
  int64_t pad = 0;      // ld = a stored row's length + pad
  size_t offset = 0;    // elements before each operand's first (1: not 16-byte aligned)
  int64_t batch = 1;
  bool broadcast_b = false;  // one B for the whole batch (stride 0)
  int64_t gap = 0;           // elements between one matrix of a batch and the next
  int padded = 7;            // the operands pad and offset apply to: 1 A, 2 B, 4 C
  int64_t round_to = 1;      // ld = a stored row's length rounded up to a multiple of this, + pad
};

std::string describe(const Case& c) {
  std::ostringstream os;
  os << c.m << "x" << c.n << "x" << c.k << (c.ta ? " A^T" : " A") << (c.tb ? " B^T" : " B") << " alpha " << c.alpha
     << " beta " << c.beta << " pad " << c.pad << " offset " << c.offset << " batch " << c.batch
     << (c.broadcast_b ? " (B broadcast)" : "") << " gap " << c.gap << " padded " << c.padded;
  return os.str();
}

constexpr double kPaddingSentinel = 776.0;  // in C's padding (exact in bf16), which no kernel may touch

// A problem on device memory, and the host values (as doubles, already rounded to the
// element types) the reference is computed from.
template <class TAB, class TC>
struct Problem {
  GemmProblem<TAB, TC> p;
  std::unique_ptr<GuardedArray<TAB>> a, b;
  std::unique_ptr<GuardedArray<TC>> c;
  std::vector<double> ha, hb, hc;
};

template <class TAB, class TC>
std::unique_ptr<Problem<TAB, TC>> make_problem(const Case& cs, uint32_t seed) {
  auto pr = std::make_unique<Problem<TAB, TC>>();
  GemmProblem<TAB, TC>& p = pr->p;
  p.m = cs.m, p.n = cs.n, p.k = cs.k, p.alpha = cs.alpha, p.beta = cs.beta, p.batch = cs.batch;
  p.trans_a = cs.ta, p.trans_b = cs.tb;
  const int64_t a_rows = cs.ta ? cs.k : cs.m, a_cols = cs.ta ? cs.m : cs.k;
  const int64_t b_rows = cs.tb ? cs.n : cs.k, b_cols = cs.tb ? cs.k : cs.n;
  auto pad = [&](int operand) { return cs.padded & operand ? cs.pad : 0; };
  auto offset = [&](int operand) { return cs.padded & operand ? cs.offset : 0; };
  auto ld = [&](int64_t row_length) {
    return (std::max<int64_t>(row_length, 1) + cs.round_to - 1) / cs.round_to * cs.round_to;
  };
  p.lda = ld(a_cols) + pad(1), p.ldb = ld(b_cols) + pad(2), p.ldc = ld(cs.n) + pad(4);
  p.stride_a = a_rows * p.lda + cs.gap, p.stride_b = cs.broadcast_b ? 0 : b_rows * p.ldb + cs.gap;
  p.stride_c = cs.m * p.ldc + cs.gap;
  pr->ha = test::rounded<TAB>(test::random_doubles(size_t(cs.batch * p.stride_a), seed, -1.0, 1.0));
  const int64_t b_size = cs.broadcast_b ? b_rows * p.ldb : cs.batch * p.stride_b;
  pr->hb = test::rounded<TAB>(test::random_doubles(size_t(b_size), seed + 1, -1.0, 1.0));
  pr->hc = test::rounded<TC>(test::random_doubles(size_t(cs.batch * p.stride_c), seed + 2, -1.0, 1.0));
  for (size_t i = 0; i < pr->hc.size(); ++i) {
    const int64_t in_matrix = int64_t(i) % p.stride_c;
    if (in_matrix >= cs.m * p.ldc || in_matrix % p.ldc >= cs.n) pr->hc[i] = kPaddingSentinel;
    else if (cs.beta == 0.0f) pr->hc[i] = NAN;  // must not be read
  }
  pr->a = std::make_unique<GuardedArray<TAB>>(test::from_doubles<TAB>(pr->ha), offset(1));
  pr->b = std::make_unique<GuardedArray<TAB>>(test::from_doubles<TAB>(pr->hb), offset(2));
  pr->c = std::make_unique<GuardedArray<TC>>(test::from_doubles<TC>(pr->hc), offset(4));
  p.a = pr->a->data(), p.b = pr->b->data(), p.c = pr->c->data();
  return pr;
}

// Compares C with the float64 reference, element by element within `ulps` (k + 4) units
// of roundoff of the magnitudes summed (see the top of the file), plus `out_rel` |c| for
// the rounding of C itself; C's padding must be untouched. Reports the worst element.
template <class TAB, class TC>
::testing::AssertionResult matches_reference(const Problem<TAB, TC>& pr, double unit, double out_rel) {
  const GemmProblem<TAB, TC>& p = pr.p;
  const std::vector<TC> got = pr.c->host();
  double worst = 0.0;
  std::string worst_at;
  size_t bad = 0;
  for (int64_t z = 0; z < p.batch; ++z)
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t col = 0; col < p.ldc; ++col) {
        const int64_t ci = z * p.stride_c + i * p.ldc + col;
        const double g = test::to_double(got[size_t(ci)]);
        if (col >= p.n) {
          if (g != kPaddingSentinel && bad++ == 0) worst_at = "padding of C written at " + std::to_string(ci);
          continue;
        }
        double sum = 0.0, mag = 0.0;
        for (int64_t kk = 0; kk < p.k; ++kk) {
          const double av = pr.ha[size_t(z * p.stride_a + (p.trans_a ? kk * p.lda + i : i * p.lda + kk))];
          const double bv = pr.hb[size_t(z * p.stride_b + (p.trans_b ? col * p.ldb + kk : kk * p.ldb + col))];
          sum += av * bv, mag += std::abs(av * bv);
        }
        const double c0 = p.beta == 0.0f ? 0.0 : pr.hc[size_t(ci)];
        const double want = p.alpha * sum + p.beta * c0;
        const double tol = double(p.k + 4) * unit * (std::abs(p.alpha) * mag + std::abs(p.beta * c0)) +
                           out_rel * std::abs(want);
        const double err = std::abs(g - want);
        if (!(err <= tol)) {  // NaN fails too
          ++bad;
          const double ratio = std::isnan(err) ? INFINITY : err / std::max(tol, 1e-300);
          if (ratio >= worst) {
            worst = ratio;
            worst_at = "[" + std::to_string(z) + "][" + std::to_string(i) + "][" + std::to_string(col) + "] got " +
                       std::to_string(g) + ", want " + std::to_string(want) + ", tolerance " + std::to_string(tol);
          }
        }
      }
  for (size_t i = 0; i < got.size(); ++i)  // the gaps between a batch's matrices
    if (int64_t(i) % p.stride_c >= p.m * p.ldc && test::to_double(got[i]) != kPaddingSentinel && bad++ == 0)
      worst_at = "gap after a matrix of C written at " + std::to_string(i);
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " elements of C wrong; worst " << worst_at;
}

constexpr double kF32Unit = 1.0 / (1 << 24);

void expect_sgemm_matches(SgemmVersion v, const Case& cs, uint32_t seed) {
  auto pr = make_problem<float, float>(cs, seed);
  sgemm(v, pr->p, nullptr);
  EXPECT_TRUE(matches_reference(*pr, kF32Unit, 0.0)) << "sgemm " << sgemm_version_name(v) << ", " << describe(cs);
}

// Sizes that reach every edge case of the tiling: a single element, odd sizes below one tile of every version,
// sizes across 64- and 128-wide tiles with k not a multiple of any BK, and one whole tile.
const Case kSizes[] = {{1, 1, 1}, {31, 33, 17}, {65, 127, 129}, {128, 128, 128}};

TEST(CudaGemm, EverySgemmVersionAndLayoutMatchesFloat64) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 1;
  for (SgemmVersion v : kSgemmVersions)
    for (int layout = 0; layout < 4; ++layout)
      for (Case cs : kSizes) {
        cs.ta = layout & 1, cs.tb = layout & 2;
        cs.round_to = 4;  // rows of whole float4: the 16-byte paths of v4 and v5 run
        expect_sgemm_matches(v, cs, seed++);
      }
}

TEST(CudaGemm, SgemmMisalignedLeadingDimensionsAndBases) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 100;
  for (SgemmVersion v : kSgemmVersions)
    for (int layout = 0; layout < 4; ++layout)
      for (Case cs : {Case{37, 41, 29}, Case{130, 133, 24}}) {  // the second has whole 128 x 128 tiles
        cs.ta = layout & 1, cs.tb = layout & 2;
        cs.pad = 1 + layout % 2 * 2;  // odd leading dimensions
        cs.offset = 1;                // and bases 4 bytes past 16-byte alignment
        expect_sgemm_matches(v, cs, seed++);
      }
  // One operand misaligned, the others aligned (128 x 128 tiles, k a multiple of 8: v5
  // would run its unchecked loop but for the misaligned one).
  for (SgemmVersion v : kSgemmVersions)
    for (int operand : {1, 2, 4}) {
      expect_sgemm_matches(v, Case{128, 256, 16, false, true, 1.0f, 0.0f, 0, 1, 1, false, 0, operand}, seed++);
      expect_sgemm_matches(v, Case{256, 128, 8, true, false, 1.0f, 0.5f, 2, 0, 1, false, 0, operand}, seed++);
    }
}

TEST(CudaGemm, SgemmAlphaAndBeta) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 200;
  for (SgemmVersion v : kSgemmVersions) {
    expect_sgemm_matches(v, Case{33, 70, 19, false, true, -1.5f, 0.5f}, seed++);
    expect_sgemm_matches(v, Case{33, 70, 19, true, false, 0.0f, 2.0f, 4}, seed++);   // C = 2 C
    expect_sgemm_matches(v, Case{40, 36, 24, false, false, 2.0f, 1.0f, 0}, seed++);  // vector epilogue, beta 1
    expect_sgemm_matches(v, Case{9, 7, 5, true, true, 0.25f, -1.0f, 1, 1}, seed++);  // scalar epilogue
  }
}

// k = 0 is C = beta C (no products); an empty m or n launches nothing.
TEST(CudaGemm, SgemmWithZeroKOrEmptyOutput) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 300;
  for (SgemmVersion v : kSgemmVersions) {
    expect_sgemm_matches(v, Case{5, 6, 0}, seed++);
    expect_sgemm_matches(v, Case{5, 6, 0, false, false, 1.0f, 3.0f}, seed++);
    auto whole = make_problem<float, float>(Case{128, 128, 0}, seed++);
    whole->p.a = whole->p.b = nullptr;  // allowed with k = 0: nothing may be read
    whole->p.lda = whole->p.ldb = 128;  // rows "aligned": v5 would take its unchecked loop
    sgemm(v, whole->p, nullptr);
    EXPECT_TRUE(matches_reference(*whole, kF32Unit, 0.0)) << "128x128x0";
    for (Case cs : {Case{0, 6, 3}, Case{5, 0, 3}}) {
      auto pr = make_problem<float, float>(cs, seed++);
      EXPECT_NO_THROW(sgemm(v, pr->p, nullptr));
      EXPECT_TRUE(matches_reference(*pr, kF32Unit, 0.0)) << describe(cs);  // padding untouched
    }
  }
}

// Many tiles: tall and wide outputs walk more groups of tile rows than kTileGroup in
// block_tile, and a batch with a broadcast B uses grid.z.
TEST(CudaGemm, SgemmManyTilesAndBatches) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 400;
  for (SgemmVersion v : kSgemmVersions) {
    expect_sgemm_matches(v, Case{1100, 3, 5}, seed++);
    expect_sgemm_matches(v, Case{3, 1100, 5, false, true}, seed++);
    expect_sgemm_matches(v, Case{260, 300, 9, true, false, 1.0f, 0.0f, 4}, seed++);
    for (int layout = 0; layout < 4; ++layout) {  // interior blocks (v5's unchecked loop) beside edge blocks
      expect_sgemm_matches(v, Case{256, 260, 24, bool(layout & 1), bool(layout & 2)}, seed++);
      expect_sgemm_matches(v, Case{260, 256, 16, bool(layout & 1), bool(layout & 2)}, seed++);
    }
    // Rows aligned, but the batch's second matrix is not: no vector loads.
    expect_sgemm_matches(v, Case{128, 128, 8, false, false, 1.0f, 0.0f, 0, 0, 2, false, 1}, seed++);
    expect_sgemm_matches(v, Case{128, 128, 8, true, true, 1.0f, 0.5f, 0, 0, 2, false, 2}, seed++);
    expect_sgemm_matches(v, Case{20, 24, 12, false, false, 1.0f, 0.5f, 0, 0, 3}, seed++);
    expect_sgemm_matches(v, Case{17, 9, 13, false, true, 1.0f, 0.0f, 1, 0, 4, true}, seed++);
  }
}

// v6 walks k in tiles of 16 fetched in two halves of 8: interior blocks run the
// prefetching loop over several tiles (both buffers, an odd and an even count; k = 8, 40,
// 56: a last tile of one half), edge blocks (n = 200) and k not a multiple of 8 the
// checked loop, beside each other in one launch, batched; the results agree with naive's
// to the bit.
TEST(CudaGemm, SgemmWarpTiledInteriorAndEdgeTiles) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 700;
  for (int layout = 0; layout < 4; ++layout) {
    const bool ta = layout & 1, tb = layout & 2;
    for (int64_t k : {8, 32, 48, 40, 56, 20})
      expect_sgemm_matches(SgemmVersion::WarpTiled, Case{256, 200, k, ta, tb}, seed++);
    expect_sgemm_matches(SgemmVersion::WarpTiled, Case{129, 256, 64, ta, tb, 0.5f, 2.0f, 0, 0, 3}, seed++);
    expect_sgemm_matches(SgemmVersion::WarpTiled, Case{256, 128, 48, ta, tb, 1.0f, 0.0f, 4, 0, 2, true}, seed++);
    Case cs{256, 130, 40, ta, tb};
    auto pr = make_problem<float, float>(cs, seed++);
    sgemm(SgemmVersion::Naive, pr->p, nullptr);
    const std::vector<float> naive = pr->c->host();
    sgemm(SgemmVersion::WarpTiled, pr->p, nullptr);
    EXPECT_TRUE(naive == pr->c->host()) << "warptiled differs from naive, " << describe(cs);
  }
}

// Every version adds the same products in the same order with one fmaf each (edge terms
// are exact zeros), so with beta = 0 they agree to the bit: deterministic and consistent.
TEST(CudaGemm, SgemmVersionsAgreeBitForBit) {
  EMBER_NEED_DEVICE();
  for (int layout = 0; layout < 4; ++layout) {
    Case cs{70, 45, 37};
    cs.ta = layout & 1, cs.tb = layout & 2, cs.pad = layout;
    auto pr = make_problem<float, float>(cs, 500 + layout);
    sgemm(SgemmVersion::Naive, pr->p, nullptr);
    const std::vector<float> first = pr->c->host();
    for (SgemmVersion v : kSgemmVersions) {
      pr->c->upload(test::from_doubles<float>(pr->hc));
      sgemm(v, pr->p, nullptr);
      const std::vector<float> got = pr->c->host();
      EXPECT_EQ(0, std::memcmp(got.data(), first.data(), got.size() * sizeof(float)))
          << sgemm_version_name(v) << " differs from naive, " << describe(cs);
    }
  }
}

TEST(CudaGemm, SgemmVersionsByNumberAndName) {
  EMBER_NEED_DEVICE();
  for (SgemmVersion v : kSgemmVersions) {
    EXPECT_EQ(parse_sgemm_version(sgemm_version_name(v)), v);
    EXPECT_EQ(parse_sgemm_version("v" + std::to_string(int(v))), v);
    EXPECT_EQ(parse_sgemm_version(std::to_string(int(v))), v);
  }
  EXPECT_THROW(parse_sgemm_version("v7"), Error);
  EXPECT_THROW(parse_sgemm_version(""), Error);
  // By name, through the CPU backend's argument order.
  auto pr = make_problem<float, float>(Case{10, 12, 7, false, true}, 600);
  const GemmProblem<float, float>& p = pr->p;
  sgemm(SgemmVersion::RegisterTiles, p.trans_a, p.trans_b, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta,
        p.c, p.ldc, nullptr);
  EXPECT_TRUE(matches_reference(*pr, kF32Unit, 0.0));
  pr->c->upload(test::from_doubles<float>(pr->hc));
  sgemm("double_buffered", p, nullptr);
  EXPECT_TRUE(matches_reference(*pr, kF32Unit, 0.0));
}

// grid.z holds 65535 matrices: larger batches take several launches, each starting at the
// right matrix (checked on the host side alone: 65536 emulated blocks would be slow).
TEST(CudaGemm, BatchesSplitIntoLaunchesOfAtMost65535) {
  EMBER_NEED_DEVICE();
  GemmProblem<float, float> p;
  p.batch = 2 * kMaxGridZ + 7, p.stride_a = 3, p.stride_b = 0, p.stride_c = 5;
  const float* a = reinterpret_cast<const float*>(uintptr_t(1) << 20);
  p.a = p.b = a, p.c = const_cast<float*>(a);
  std::vector<std::pair<int64_t, int64_t>> launches;  // (first matrix, count)
  for_each_batch_chunk(p, [&](const GemmArgs<float, float>& g, int64_t count) {
    const int64_t first = (g.a - a) / 3;
    EXPECT_EQ(g.b, a);
    EXPECT_EQ(g.c - p.c, first * 5);
    launches.emplace_back(first, count);
  });
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, kMaxGridZ}, {kMaxGridZ, kMaxGridZ}, {2 * kMaxGridZ, 7}};
  EXPECT_EQ(launches, want);
  EXPECT_EQ(sgemm_config(SgemmVersion::DoubleBuffered, 300, 200, 7).grid.z, 7u);
  EXPECT_EQ(sgemm_config(SgemmVersion::DoubleBuffered, 300, 200, 7).grid.x, 3u * 2u);
}

TEST(CudaGemm, BadArgumentsRaiseErrors) {
  EMBER_NEED_DEVICE();
  auto pr = make_problem<float, float>(Case{8, 6, 4}, 700);
  auto with = [&](auto change) {
    GemmProblem<float, float> p = pr->p;
    change(p);
    return p;
  };
  auto message = [](auto f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  const auto bad_lda = with([](auto& p) { p.lda = 3; });
  EXPECT_NE(message([&] { sgemm(kSgemmDefault, bad_lda, nullptr); }).find("lda 3"), std::string::npos);
  const auto bad_lda_t = with([](auto& p) { p.trans_a = true; });  // lda 4 < m = 8
  EXPECT_NE(message([&] { sgemm(kSgemmDefault, bad_lda_t, nullptr); }).find("A [k, m]"), std::string::npos);
  EXPECT_THROW(sgemm(kSgemmDefault, with([](auto& p) { p.ldb = 5; }), nullptr), Error);
  EXPECT_THROW(sgemm(kSgemmDefault, with([](auto& p) { p.ldc = 2; }), nullptr), Error);
  EXPECT_THROW(sgemm(kSgemmDefault, with([](auto& p) { p.k = -1; }), nullptr), Error);
  EXPECT_THROW(sgemm(kSgemmDefault, with([](auto& p) { p.m = int64_t(1) << 31; }), nullptr), Error);
  EXPECT_THROW(sgemm(kSgemmDefault, with([](auto& p) { p.c = nullptr; }), nullptr), Error);
  EXPECT_THROW(sgemm(kSgemmDefault, with([](auto& p) { p.a = nullptr; }), nullptr), Error);
  EXPECT_THROW(sgemm(SgemmVersion(9), pr->p, nullptr), Error);
  GemmProblem<__nv_bfloat16, float> pb;
  pb.m = 4, pb.n = 4, pb.k = 4, pb.lda = 2, pb.ldb = 4, pb.ldc = 4;
  EXPECT_NE(message([&] { gemm_bf16(pb, nullptr); }).find("gemm_bf16: lda 2"), std::string::npos);
}

// --- bf16 tensor cores ------------------------------------------------------------------------

// Each case in both block shapes (gemm_bf16 picks one by size; see the dispatch test).
template <class TC>
void expect_bf16_matches(const Case& cs, uint32_t seed) {
  auto pr = make_problem<__nv_bfloat16, TC>(cs, seed);
  // Tensor cores accumulate in float32 but need not round each addition to nearest:
  // twice the float32 allowance. A bf16 C is rounded once more (2^-8 relative).
  const double out_rel = std::is_same_v<TC, float> ? 0.0 : 1.0 / 256;
  const char* out = std::is_same_v<TC, float> ? "f32" : "bf16";
  gemm_bf16_with<Bf16Small>(pr->p, nullptr);
  EXPECT_TRUE(matches_reference(*pr, 2 * kF32Unit, out_rel)) << "gemm_bf16 128 x 128 -> " << out << ", " << describe(cs);
  pr->c->upload(test::from_doubles<TC>(pr->hc));
  gemm_bf16_with<Bf16Large>(pr->p, nullptr);
  EXPECT_TRUE(matches_reference(*pr, 2 * kF32Unit, out_rel)) << "gemm_bf16 128 x 256 -> " << out << ", " << describe(cs);
}

TEST(CudaGemm, Bf16TensorCoreGemmMatchesFloat64) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 800;
  for (int layout = 0; layout < 4; ++layout) {
    const bool ta = layout & 1, tb = layout & 2;
    for (Case cs : {Case{1, 1, 1}, Case{31, 33, 17}, Case{65, 127, 129}, Case{128, 128, 128}, Case{257, 200, 320}}) {
      cs.ta = ta, cs.tb = tb;
      cs.round_to = 8;  // rows 16-byte aligned: the cp.async path
      expect_bf16_matches<float>(cs, seed++);
      expect_bf16_matches<__nv_bfloat16>(cs, seed++);
    }
    // Unaligned rows and bases: the element-by-element copy path, for both operands or one.
    expect_bf16_matches<float>(Case{67, 45, 83, ta, tb, 1.0f, 0.0f, 3, 1}, seed++);
    expect_bf16_matches<float>(Case{130, 70, 40, ta, tb, 1.0f, 0.0f, 0, 1, 1, false, 0, 1, 8}, seed++);
    expect_bf16_matches<float>(Case{70, 130, 40, ta, tb, 1.0f, 0.0f, 2, 0, 1, false, 0, 2, 8}, seed++);
    // alpha, beta, a batch with a broadcast B.
    expect_bf16_matches<float>(Case{100, 140, 72, ta, tb, -0.5f, 2.0f, 8, 0, 3, true}, seed++);
    expect_bf16_matches<__nv_bfloat16>(Case{100, 140, 72, ta, tb, 1.5f, 0.5f, 1, 1, 2}, seed++);
    expect_bf16_matches<float>(Case{9, 8, 0, ta, tb, 1.0f, 0.5f}, seed++);  // k = 0: C = beta C
  }
}

// The edges of the 128 x 256 tiles and of the 4-stage pipeline: m and n one past a tile
// (a second tile row or column holding one line), one short of it, a line in the middle
// of a B tile; k with fewer tiles than stages (1, 2), one element into a last tile, and
// more tiles than stages (the ring of stages wraps); a single row or column of C; a batch.
TEST(CudaGemm, Bf16TensorCoreGemmAtTheLargeTilesEdges) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 900;
  for (int layout = 0; layout < 4; ++layout) {
    const bool ta = layout & 1, tb = layout & 2;
    for (Case cs : {Case{129, 257, 64}, Case{127, 255, 65}, Case{40, 136, 128}, Case{1, 300, 200}, Case{300, 1, 63},
                    Case{136, 264, 5 * 64 + 8}}) {
      cs.ta = ta, cs.tb = tb;
      cs.round_to = 8;
      expect_bf16_matches<float>(cs, seed++);
    }
    expect_bf16_matches<__nv_bfloat16>(Case{130, 260, 136, ta, tb, 1.0f, 0.25f, 0, 0, 3, false, 8, 7, 8}, seed++);
    expect_bf16_matches<float>(Case{129, 258, 70, ta, tb, 2.0f, 0.0f, 1, 1, 2, true}, seed++);  // unaligned
  }
}

#if !defined(__CUDACC__)
// Shared-memory wavefronts as the hardware serves 16-byte-per-lane accesses (ldmatrix's
// rows, cp.async's chunks): a quarter-warp at a time, each quarter as many wavefronts as
// the most distinct 4-byte words one of the 32 banks is asked for. The emulator's profile
// cannot count these (its ldmatrix and cp.async models move data lane by lane, and those
// are the accesses it sees), so this checks the kernel's own address functions.
int wavefronts_16b(const uint32_t (&addr)[32]) {
  int total = 0;
  for (int quarter = 0; quarter < 4; ++quarter) {
    int most = 0;
    for (int bank = 0; bank < 32; ++bank) {
      std::vector<uint32_t> words;
      for (int l = 8 * quarter; l < 8 * quarter + 8; ++l)
        for (uint32_t w = addr[l] / 4; w < addr[l] / 4 + 4; ++w)
          if (int(w % 32) == bank && std::find(words.begin(), words.end(), w) == words.end()) words.push_back(w);
      most = std::max(most, int(words.size()));
    }
    total += most;
  }
  return total;
}

// Fragments names, for every lane, the row ldmatrix.x4 needs (matrix q = lane / 8 of the
// 16 x 16 block: mn + 8 (q % 2), k + 8 (q / 2) for A, the other way round for B) at its
// swizzled place; every ldmatrix.x4 of a warp and every cp.async of a warp (32 chunks in a
// row, WholeTileCopy's and load_tile's order) takes the ideal 4 wavefronts.
template <bool KContig, int MN, bool kMnFirst, int kThreads>
void expect_tile_layout_right() {
  using namespace bf16_gemm;
  using T = Tile<KContig, MN>;
  uint32_t addr[32];
  for (int mn0 = 0; mn0 < MN; mn0 += 64)
    for (int b = 0; b < 4; ++b)
      for (int s = 0; s < kBK / 16; ++s) {
        for (int lane = 0; lane < 32; ++lane) {
          const int q = lane / 8, r = lane % 8;
          const int mn = mn0 + 16 * b + 8 * (kMnFirst ? q % 2 : q / 2) + (KContig ? r : 0);
          const int k = 16 * s + 8 * (kMnFirst ? q / 2 : q % 2) + (KContig ? 0 : r);
          const uint32_t want = KContig ? T::offset(mn, k / 8) : T::offset(k, mn / 8);
          addr[lane] = Fragments<KContig, MN, kMnFirst>(mn0, lane).at(b, s);
          EXPECT_EQ(addr[lane], want) << "lane " << lane << ", block " << b << ", step " << s << ", KContig " << KContig;
        }
        EXPECT_EQ(wavefronts_16b(addr), 4) << "ldmatrix at mn " << mn0 + 16 * b << ", step " << s;
      }
  for (int first = 0; first < T::kRows * T::kChunks; first += 32) {
    for (int lane = 0; lane < 32; ++lane) addr[lane] = T::offset((first + lane) / T::kChunks, (first + lane) % T::kChunks);
    EXPECT_EQ(wavefronts_16b(addr), 4) << "cp.async of chunks " << first << "+, KContig " << KContig << ", MN " << MN;
  }
  // WholeTileCopy: thread tid's chunk i is chunk tid + i * kThreads of load_tile's order.
  using Copy = WholeTileCopy<KContig, MN, kThreads>;
  const std::vector<__nv_bfloat16> panel(512);  // a panel with ld 1, for the constructor's pointer
  for (int tid = 0; tid < kThreads; ++tid) {
    const Copy copy(panel.data(), 1, 0, tid);
    for (int i = 0; i < Copy::kPerThread; ++i) {
      const int id = tid + i * kThreads;
      EXPECT_EQ(copy.dst + uint32_t(i * Copy::kRowStep * T::kChunks * 16), T::offset(id / T::kChunks, id % T::kChunks));
    }
  }
}

TEST(CudaGemm, Bf16SwizzledTilesHaveNoBankConflicts) {
  expect_tile_layout_right<true, 128, true, Bf16Small::kThreads>();  // A [m][k]
  expect_tile_layout_right<false, 128, true, Bf16Small::kThreads>();  // A [k][m]
  expect_tile_layout_right<true, 128, false, Bf16Small::kThreads>();  // B [n][k]
  expect_tile_layout_right<false, 128, false, Bf16Small::kThreads>();  // B [k][n]
  expect_tile_layout_right<true, 128, true, Bf16Large::kThreads>();
  expect_tile_layout_right<false, 128, true, Bf16Large::kThreads>();
  expect_tile_layout_right<true, 256, false, Bf16Large::kThreads>();
  expect_tile_layout_right<false, 256, false, Bf16Large::kThreads>();
  // The check itself: the unswizzled layout's ldmatrix (8 rows 128 bytes apart) takes 8 a quarter.
  uint32_t rows[32];
  for (int lane = 0; lane < 32; ++lane) rows[lane] = uint32_t(lane % 8 * 128 + lane / 8 * 16);
  EXPECT_EQ(wavefronts_16b(rows), 32);
}
#endif

// gemm_bf16 takes the large tiles when they give every SM a block at least.
TEST(CudaGemm, Bf16TensorCoreGemmPicksTheBlockShapeBySize) {
  EMBER_NEED_DEVICE();
  const int64_t sms = sm_count();
  EXPECT_TRUE(gemm_bf16_uses_large_tiles(128, 256 * sms, 1));
  EXPECT_TRUE(gemm_bf16_uses_large_tiles(128 * sms - 127, 129, 1));  // sms x 1 tiles, partial ones
  EXPECT_TRUE(gemm_bf16_uses_large_tiles(100, 200, sms));
  EXPECT_FALSE(gemm_bf16_uses_large_tiles(128, 256 * (sms - 1), 1));
  EXPECT_FALSE(gemm_bf16_uses_large_tiles(100, 200, sms - 1));
  EXPECT_EQ(gemm_bf16_config<Bf16Large>(300, 600, 2).grid.x, 3u * 3u);
  EXPECT_EQ(gemm_bf16_config<Bf16Large>(300, 600, 2).block.x, 256u);
  EXPECT_EQ(gemm_bf16_config<Bf16Small>(300, 600, 2).grid.x, 3u * 5u);
  // Through gemm_bf16 both ways: a size that takes the large tiles, and one that does not.
  uint32_t seed = 950;
  for (const Case& cs : {Case{130, 256 * sms, 40}, Case{130, 256, 40}}) {
    auto pr = make_problem<__nv_bfloat16, float>(cs, seed++);
    gemm_bf16(pr->p, nullptr);
    EXPECT_TRUE(matches_reference(*pr, 2 * kF32Unit, 0.0)) << describe(cs);
  }
}

}  // namespace
}  // namespace ember::kernels::cuda
