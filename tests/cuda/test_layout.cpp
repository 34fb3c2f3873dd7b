// The layout kernels (kernels/cuda/layout.cuh: tiled transpose, permute-to-contiguous on
// each of its paths) and im2col / col2im (kernels/cuda/im2col.cuh). Layout kernels move
// bits, so they are checked bit for bit against the CPU backend's views: the source
// element of every output position comes from ember's permute/transpose/narrow/slice/
// expand + contiguous() over an arange. im2col/col2im against float64 references, and
// im2col's layout against ember::conv2d.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/ops.h"
#include "kernels/cuda/im2col.cuh"
#include "kernels/cuda/layout.cuh"
#include "tests/cuda/harness.h"

namespace ember::kernels::cuda::test {
namespace {

Layout layout_of(const Tensor& view) {
  Layout l;
  l.ndim = int(view.dim());
  for (int d = 0; d < l.ndim; ++d) {
    l.sizes[d] = view.shape()[d];
    l.strides[d] = view.strides()[d];
  }
  return l;
}

// Random bit patterns (no two alike in practice), so any misplaced element shows.
template <class T>
::testing::AssertionResult same_bits(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0)
      return ::testing::AssertionFailure() << "first difference at element " << i << " of " << got.size();
  return ::testing::AssertionSuccess();
}

// What a copy gives whose output element i is input element src[i].
template <class T>
std::vector<T> gathered(const std::vector<T>& in, const std::vector<int64_t>& src) {
  std::vector<T> out(src.size());
  for (size_t i = 0; i < src.size(); ++i) out[i] = in[size_t(src[i])];
  return out;
}

// x [batch, rows, cols] transposed to [batch, cols, rows].
std::vector<float> transposed(const std::vector<float>& x, int64_t batch, int64_t rows, int64_t cols) {
  std::vector<float> out(x.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) out[size_t((b * cols + c) * rows + r)] = x[size_t((b * rows + r) * cols + c)];
  return out;
}

// Copies `view` (a view of a contiguous base tensor of `base_numel` elements) to a
// contiguous device array with permute_contiguous and checks every element against the
// CPU: the same view of arange(base_numel), made contiguous, names each element's source.
// in_pad / out_pad: elements before the device arrays' data (1: not 16-byte aligned).
template <class T>
void check_permute(const Tensor& view, int64_t base_numel, PermutePath expect, size_t in_pad = 0, size_t out_pad = 0) {
  SCOPED_TRACE("view " + shape_str(view.shape()) + " strides " + shape_str(view.strides()) + " offset " +
               std::to_string(view.offset()) + ", " + std::to_string(sizeof(T)) + "-byte elements, pads " +
               std::to_string(in_pad) + "/" + std::to_string(out_pad));
  const Layout l = layout_of(view);
  EXPECT_EQ(permute_path(l), expect);
  const auto host = random_bits<T>(size_t(base_numel), uint32_t(base_numel * 7 + sizeof(T)));
  DeviceArray<T> in(host, in_pad);
  DeviceArray<T> out(size_t(view.numel()), out_pad);
  permute_contiguous(in.data() + view.offset(), out.data(), l, nullptr);
  EXPECT_TRUE(same_bits(out.host(), gathered(host, view.contiguous().to_vector<int64_t>())));
}

// The same view taken of arange(numel) (int64, so that its values are the source indices).
Tensor base(const Shape& shape) { return arange(shape_numel(shape)).view(shape); }

// transpose_batched of random bits x [b, r, c] (seeded by `seed`; device arrays `pad`
// elements past an aligned address) against the CPU's transpose; before(in, out) sees
// the device arrays first.
template <class T>
void check_transpose_batched(int64_t b, int64_t r, int64_t c, size_t pad, uint32_t seed,
                             const std::function<void(const T*, const T*)>& before = nullptr) {
  const auto host = random_bits<T>(size_t(b * r * c), seed);
  DeviceArray<T> in(host, pad), out(host.size(), pad);
  if (before) before(in.data(), out.data());
  transpose_batched(in.data(), out.data(), b, r, c, nullptr);
  const std::vector<int64_t> src = base({b, r, c}).transpose(1, 2).contiguous().to_vector<int64_t>();
  EXPECT_TRUE(same_bits(out.host(), gathered(host, src))) << sizeof(T) << "-byte elements, pad " << pad;
}

TEST(CudaLayout, TransposeBatchedOfAwkwardShapes) {
  EMBER_NEED_DEVICE();
  // {3, 64, 32} and {2, 130, 96}: whole 32 x 64 tiles (the unguarded path) in a batch, and
  // beside partial ones; {5, 128, 256}: 80 whole tiles, several grid-stride turns;
  // {2, 100, 330}: 11 tiles along a, a band of 8 and a last band of 3 (Note [Tile order]).
  const std::vector<std::array<int64_t, 3>> shapes = {{1, 1, 1},    {3, 33, 31},  {2, 70, 129}, {1, 32, 64},
                                                      {3, 64, 32},  {2, 130, 96}, {5, 128, 256}, {2, 1, 4097},
                                                      {1, 1023, 3}, {0, 5, 5},    {4, 0, 3},    {2, 100, 330}};
  for (const auto& [b, r, c] : shapes) {
    SCOPED_TRACE(std::to_string(b) + " x " + std::to_string(r) + " x " + std::to_string(c));
    const uint32_t seed = uint32_t(r * 131 + c);
    check_transpose_batched<float>(b, r, c, 0, seed);
    check_transpose_batched<float>(b, r, c, 1, seed);
    check_transpose_batched<__half>(b, r, c, 1, seed);
    check_transpose_batched<double>(b, r, c, 0, seed);
    check_transpose_batched<uint8_t>(b, r, c, 3, seed);
  }
}

TEST(CudaLayout, ContiguousPathVectorizesWithHeadAndTail) {
  EMBER_NEED_DEVICE();
  for (int64_t n : kAwkwardSizes) {
    if (n == 0) continue;  // below
    const Tensor b = base({n + 3});
    const Tensor v = b.narrow(0, 1, n);  // contiguous, starting at element 1
    check_permute<float>(v, n + 3, PermutePath::kContiguous, 0, 0);  // in and out 4 bytes apart mod 16
    check_permute<float>(v, n + 3, PermutePath::kContiguous, 0, 1);  // both 4 bytes past 16: head, 16-byte body
    check_permute<__nv_bfloat16>(v, n + 3, PermutePath::kContiguous, 1, 0);
    check_permute<double>(v, n + 3, PermutePath::kContiguous, 0, 0);
  }
  // Size-1 dims and a merged 3-D view are contiguous too.
  check_permute<float>(base({2, 1, 33, 5}).permute({0, 2, 1, 3}), 330, PermutePath::kContiguous);
  check_permute<float>(base({0, 4}), 0, PermutePath::kEmpty);
  check_permute<float>(base({1, 1}), 1, PermutePath::kContiguous);
}

TEST(CudaLayout, TiledPathForTransposingPermutes) {
  EMBER_NEED_DEVICE();
  // NCHW -> NHWC (H and W merge into one dim of stride 1), NHWC -> NCHW, a 2-D .t(), and
  // transposes of misaligned and strided views.
  check_permute<float>(base({2, 40, 17, 19}).permute({0, 2, 3, 1}), 2 * 40 * 17 * 19, PermutePath::kTiled);
  check_permute<float>(base({2, 17, 19, 40}).permute({0, 3, 1, 2}), 2 * 40 * 17 * 19, PermutePath::kTiled, 1, 1);
  check_permute<__half>(base({33, 70}).t(), 33 * 70, PermutePath::kTiled, 1, 0);
  check_permute<double>(base({1023, 17}).t(), 1023 * 17, PermutePath::kTiled);
  check_permute<uint8_t>(base({3, 45, 33}).transpose(1, 2), 3 * 45 * 33, PermutePath::kTiled, 1, 3);
  check_permute<float>(base({35, 70}).narrow(0, 1, 33).narrow(1, 3, 65).t(), 35 * 70, PermutePath::kTiled);
  // A batch of three strided dims around the tile: [2, 3, 20, 4, 18] -> dims (3, 0, 4, 1, 2).
  check_permute<float>(base({2, 3, 20, 4, 18}).permute({3, 0, 4, 1, 2}), 2 * 3 * 20 * 4 * 18, PermutePath::kTiled);
}

TEST(CudaLayout, RowsPathForContiguousInnerDims) {
  EMBER_NEED_DEVICE();
  check_permute<float>(base({5, 7, 9}).permute({1, 0, 2}), 315, PermutePath::kRows);        // 36-byte rows
  check_permute<float>(base({4, 6, 8}).permute({1, 0, 2}), 192, PermutePath::kRows);        // 16-byte vectors
  check_permute<float>(base({4, 6, 8}).permute({1, 0, 2}), 192, PermutePath::kRows, 1, 0);  // misaligned input
  check_permute<__half>(base({3, 33, 16}).permute({1, 0, 2}), 3 * 33 * 16, PermutePath::kRows);
  check_permute<float>(base({31, 12}).narrow(1, 1, 9), 31 * 12, PermutePath::kRows);  // rows of a slice
  check_permute<float>(base({5, 9}).narrow(1, 0, 4), 45, PermutePath::kRows);  // 16-byte rows, 36-byte stride
  check_permute<double>(base({3, 4, 5, 6}).permute({2, 0, 3, 1}).transpose(2, 3), 360, PermutePath::kRows);
  check_permute<float>(base({3, 1, 33}).expand({3, 4, 33}), 99, PermutePath::kRows);  // broadcast outer dim
}

TEST(CudaLayout, GeneralPathForEverythingElse) {
  EMBER_NEED_DEVICE();
  check_permute<float>(base({6, 10}).slice(1, 0, 10, 2), 60, PermutePath::kGeneral);  // no unit stride
  check_permute<float>(base({3, 1}).expand({3, 7}), 3, PermutePath::kGeneral);        // inner stride 0
  // NCHW -> NHWC with C = 3: too thin a tile.
  check_permute<float>(base({2, 3, 33, 31}).permute({0, 2, 3, 1}), 2 * 3 * 33 * 31, PermutePath::kGeneral);
  check_permute<__half>(base({5, 4}).t(), 20, PermutePath::kGeneral, 1, 1);  // tile dims under kMinTileDim
  // Eight dims, reversed.
  const Shape s8 = {2, 3, 2, 1, 3, 2, 2, 3};
  check_permute<float>(base(s8).permute({7, 6, 5, 4, 3, 2, 1, 0}), shape_numel(s8), PermutePath::kGeneral);
  check_permute<double>(base({4097, 3}).slice(0, 1, 4097, 3).t(), 4097 * 3, PermutePath::kGeneral);
}

// permute_contiguous takes the gather's 32-bit instantiation wherever the view fits it
// (these views all do); the 64-bit one, for views past 2^31 elements or offsets, is
// launched here directly on the same views and must give the same bits.
TEST(CudaLayout, GatherGivesTheSameBitsInEitherIndexWidth) {
  EMBER_NEED_DEVICE();
  const Tensor views[] = {base({2, 3, 33, 31}).permute({0, 2, 3, 1}), base({6, 10}).slice(1, 0, 10, 2),
                          base({3, 4, 5, 6}).permute({2, 0, 3, 1}).transpose(2, 3)};
  for (const Tensor& view : views) {
    SCOPED_TRACE("view " + shape_str(view.shape()) + " strides " + shape_str(view.strides()));
    const Layout l = coalesce_layout(layout_of(view));
    const Layout* const layouts[1] = {&l};
    const Indexer<1> ix = make_indexer<1>(layouts);
    const int64_t n = view.numel();
    ASSERT_TRUE(ix.fits_32_bits(n));
    const auto host = random_bits<float>(size_t(view.numel() * 4), 11);
    DeviceArray<float> in(host), out32(static_cast<size_t>(n)), out64(static_cast<size_t>(n));
    const LaunchConfig config{dim3(3), dim3(kBlockThreads), 0};  // several grid-stride turns
    launch<strided_gather_kernel<float, uint32_t>>(config, nullptr, in.data(), out32.data(), ix.narrow(), uint32_t(n));
    launch<strided_gather_kernel<float, int64_t>>(config, nullptr, in.data(), out64.data(), ix, n);
    const std::vector<float> want = gathered(host, view.contiguous().to_vector<int64_t>());
    EXPECT_TRUE(same_bits(out32.host(), want));
    EXPECT_TRUE(same_bits(out64.host(), want));
  }
}

// The same for the tiled transpose: out [2, 45, 37] = in [2, 37, 45] transposed, with
// partial tiles on both sides, in either width.
TEST(CudaLayout, TiledTransposeGivesTheSameBitsInEitherIndexWidth) {
  EMBER_NEED_DEVICE();
  const int64_t batch = 2, rows = 37, cols = 45, n = batch * rows * cols;
  layout_detail::TileMap<> m;
  m.na = cols, m.nb = rows, m.in_stride_b = cols, m.out_stride_a = rows;
  m.tiles_a = (cols + layout_detail::kTile - 1) / layout_detail::kTile;
  m.tiles_b = (rows + layout_detail::kTileB - 1) / layout_detail::kTileB;
  m.nbatch = 1, m.batch_sizes[0] = batch, m.batch_in[0] = m.batch_out[0] = rows * cols;
  ASSERT_TRUE(m.fits_32_bits());
  const auto host = random_bits<float>(size_t(n), 5);
  const std::vector<float> want = transposed(host, batch, rows, cols);
  DeviceArray<float> in(host), out32(static_cast<size_t>(n)), out64(static_cast<size_t>(n));
  const LaunchConfig config{dim3(3), dim3(layout_detail::kTile, layout_detail::kTileRows), 0};
  launch<tiled_transpose_kernel<float, uint32_t>>(config, nullptr, in.data(), out32.data(), m.narrow(),
                                                  uint32_t(m.tiles()));
  launch<tiled_transpose_kernel<float, int64_t>>(config, nullptr, in.data(), out64.data(), m, m.tiles());
  EXPECT_TRUE(same_bits(out32.host(), want));
  EXPECT_TRUE(same_bits(out64.host(), want));
  // Where 32 bits stop sufficing: 2^31 elements in one batch of tiles, or an input offset
  // at 2^31.
  m.batch_sizes[0] = (int64_t{1} << 31) / (rows * cols) + 1;
  EXPECT_FALSE(m.fits_32_bits());
  m.batch_sizes[0] = 1, m.in_stride_b = (int64_t{1} << 31) / (rows - 1);
  EXPECT_FALSE(m.fits_32_bits());
}

// The vector transpose (Note [Vector transpose]): 2-, 4- and 8-byte elements whose strides
// are multiples of a 16-byte vector, whole tiles (kT = 128, 64, 32 elements) beside edge
// tiles on either side, batches, several grid-stride turns; misaligned pointers fall back
// to the scalar kernel with the same bits.
TEST(CudaLayout, VectorTransposeOfAwkwardShapes) {
  EMBER_NEED_DEVICE();
  const std::vector<std::array<int64_t, 3>> shapes = {{1, 64, 64},  {2, 132, 200}, {3, 68, 72},  {1, 256, 136},
                                                      {2, 136, 264}, {1, 128, 128}, {3, 34, 66}, {2, 40, 96}};
  for (const auto& [b, r, c] : shapes) {
    SCOPED_TRACE(std::to_string(b) + " x " + std::to_string(r) + " x " + std::to_string(c));
    auto run = [&](auto tag, size_t pad) {
      using T = decltype(tag);
      constexpr int64_t V = 16 / int64_t(sizeof(T));
      const bool fits = pad == 0 && r % V == 0 && c % V == 0 && r >= 16 * V && c >= 16 * V;
      check_transpose_batched<T>(b, r, c, pad, uint32_t(r * 31 + c), [&](const T* in, const T* out) {
        layout_detail::TileMap<> m;
        m.na = c, m.nb = r, m.in_stride_b = c, m.out_stride_a = r;
        m.nbatch = 1, m.batch_sizes[0] = b, m.batch_in[0] = m.batch_out[0] = r * c;
        EXPECT_EQ(layout_detail::vector_transpose_fits(in, out, m), fits) << sizeof(T) << "-byte";
      });
    };
    run(float{}, 0);
    run(float{}, 1);
    run(__half{}, 0);
    run(double{}, 0);
    run(int32_t{}, 0);
  }
  // The bench's NCHW -> NHWC (C = 64: one tile along b), NHWC -> NCHW with an edge tile,
  // and a 2-D .t() of a view whose row stride is a multiple of 4 but whose start is not
  // 16-byte aligned (scalar kernel).
  check_permute<float>(base({2, 64, 12, 12}).permute({0, 2, 3, 1}), 2 * 64 * 144, PermutePath::kTiled);
  check_permute<__nv_bfloat16>(base({2, 12, 12, 136}).permute({0, 3, 1, 2}), 2 * 136 * 144, PermutePath::kTiled);
  check_permute<float>(base({2, 10, 10, 68}).permute({0, 3, 1, 2}), 2 * 68 * 100, PermutePath::kTiled);
  check_permute<float>(base({70, 132}).narrow(1, 1, 128).t(), 70 * 132, PermutePath::kTiled);
}

// The vector kernel gives the same bits in either index width, over several grid turns.
TEST(CudaLayout, VectorTransposeGivesTheSameBitsInEitherIndexWidth) {
  EMBER_NEED_DEVICE();
  const int64_t batch = 2, rows = 72, cols = 136, n = batch * rows * cols;
  layout_detail::TileMap<> m;
  m.na = cols, m.nb = rows, m.in_stride_b = cols, m.out_stride_a = rows;
  m.nbatch = 1, m.batch_sizes[0] = batch, m.batch_in[0] = m.batch_out[0] = rows * cols;
  m = layout_detail::with_tiles(m, 64, 64);
  ASSERT_TRUE(m.fits_32_bits());
  const auto host = random_bits<float>(size_t(n), 9);
  const std::vector<float> want = transposed(host, batch, rows, cols);
  DeviceArray<float> in(host), out32(static_cast<size_t>(n)), out64(static_cast<size_t>(n));
  const LaunchConfig config{dim3(5), dim3(256), 0};
  launch<tiled_transpose_vec_kernel<float, uint32_t>>(config, nullptr, in.data(), out32.data(), m.narrow(),
                                                      uint32_t(m.tiles()));
  launch<tiled_transpose_vec_kernel<float, int64_t>>(config, nullptr, in.data(), out64.data(), m, m.tiles());
  EXPECT_TRUE(same_bits(out32.host(), want));
  EXPECT_TRUE(same_bits(out64.host(), want));
}

TEST(CudaLayout, BadArgumentsAreErrors) {
  EMBER_NEED_DEVICE();
  Layout l;
  l.ndim = 9;
  EXPECT_THROW(permute_path(l), Error);
  l.ndim = 1;
  l.sizes[0] = -1;
  EXPECT_THROW(permute_path(l), Error);
  l.sizes[0] = 4;
  l.strides[0] = 1;
  DeviceArray<float> a(4), b(4);
  EXPECT_THROW(permute_contiguous_bytes(a.data(), b.data(), l, 3, nullptr), Error);
  EXPECT_THROW(transpose_batched(a.data(), b.data(), 1, -2, 2, nullptr), Error);
}

// --- im2col / col2im ------------------------------------------------------------------------

struct ConvCase {
  int64_t N, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw;
};
const std::vector<ConvCase> kConvCases = {
    {1, 3, 7, 9, 3, 3, 1, 1, 1, 1, 1, 1},  // "same" 3x3
    {2, 3, 8, 5, 3, 2, 2, 1, 1, 0, 1, 2},  // stride, padding and dilation per axis
    {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1},
    {2, 4, 9, 11, 5, 3, 3, 2, 2, 1, 2, 1},
    {1, 2, 2, 3, 3, 3, 2, 2, 1, 1, 1, 1},  // windows mostly padding
    {1, 3, 13, 1, 4, 1, 3, 1, 2, 0, 1, 1},  // one column
    {0, 3, 5, 5, 3, 3, 1, 1, 1, 1, 1, 1},  // empty batch
};

Im2colGeometry geometry(const ConvCase& c) {
  return im2col_geometry(c.N, c.C, c.H, c.W, c.kh, c.kw, c.sh, c.sw, c.ph, c.pw, c.dh, c.dw);
}
std::string str(const ConvCase& c) {
  return "[" + std::to_string(c.N) + ", " + std::to_string(c.C) + ", " + std::to_string(c.H) + ", " +
         std::to_string(c.W) + "] kernel " + std::to_string(c.kh) + "x" + std::to_string(c.kw) + " stride " +
         std::to_string(c.sh) + "," + std::to_string(c.sw) + " pad " + std::to_string(c.ph) + "," +
         std::to_string(c.pw) + " dilation " + std::to_string(c.dh) + "," + std::to_string(c.dw);
}

// f(col index, x index) for each tap of each output position that lands inside the input,
// in PyTorch's im2col order: col[n][(c*kh + i)*kw + j][oh*OW + ow] = x[n][c][h][w].
template <class F>
void for_each_tap(const Im2colGeometry& g, F&& f) {
  const int64_t rows = g.C * g.kh * g.kw, P = g.OH * g.OW;
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t j = 0; j < g.kw; ++j)
          for (int64_t oh = 0; oh < g.OH; ++oh)
            for (int64_t ow = 0; ow < g.OW; ++ow) {
              const int64_t h = oh * g.sh - g.ph + i * g.dh, w = ow * g.sw - g.pw + j * g.dw;
              if (h >= 0 && h < g.H && w >= 0 && w < g.W)
                f(size_t((n * rows + (c * g.kh + i) * g.kw + j) * P + oh * g.OW + ow),
                  size_t(((n * g.C + c) * g.H + h) * g.W + w));
            }
}

// The float64 im2col of PyTorch's definition.
std::vector<double> im2col_reference(const std::vector<double>& x, const Im2colGeometry& g) {
  std::vector<double> col(size_t(g.N * g.C * g.kh * g.kw * g.OH * g.OW), 0.0);
  for_each_tap(g, [&](size_t ci, size_t xi) { col[ci] = x[xi]; });
  return col;
}

// Its adjoint, summed in float64.
std::vector<double> col2im_reference(const std::vector<double>& col, const Im2colGeometry& g) {
  std::vector<double> x(size_t(g.N * g.C * g.H * g.W), 0.0);
  for_each_tap(g, [&](size_t ci, size_t xi) { x[xi] += col[ci]; });
  return x;
}

TEST(CudaIm2col, Im2colMatchesFloat64Reference) {
  EMBER_NEED_DEVICE();
  for (const ConvCase& c : kConvCases) {
    SCOPED_TRACE(str(c));
    const Im2colGeometry g = geometry(c);
    const auto x = random_doubles(size_t(c.N * c.C * c.H * c.W), uint32_t(c.H * 17 + c.W));
    const auto want = im2col_reference(x, g);
    DeviceArray<float> dx(from_doubles<float>(x), 1), col(want.size(), 1);
    im2col(dx.data(), col.data(), g, nullptr);
    // Copies: exact (every float64 input is first rounded to float32, as uploaded).
    std::vector<double> want_f(want.size());
    for (size_t i = 0; i < want.size(); ++i) want_f[i] = double(float(want[i]));
    EXPECT_TRUE(all_close(col.host(), want_f, 0.0));
    DeviceArray<double> dx64(x), col64(want.size());
    im2col(dx64.data(), col64.data(), g, nullptr);
    EXPECT_TRUE(all_close(col64.host(), want, 0.0));
    // A bf16 input widened to float32 columns (conv2d's 16-bit path): exact, of the
    // rounded input.
    DeviceArray<__nv_bfloat16> dxb(from_doubles<__nv_bfloat16>(x));
    DeviceArray<float> colb(want.size(), 1);
    im2col(dxb.data(), colb.data(), g, nullptr);
    EXPECT_TRUE(all_close(colb.host(), im2col_reference(rounded<__nv_bfloat16>(x), g), 0.0));
  }
}

TEST(CudaIm2col, Col2imMatchesFloat64Reference) {
  EMBER_NEED_DEVICE();
  for (const ConvCase& c : kConvCases) {
    SCOPED_TRACE(str(c));
    const Im2colGeometry g = geometry(c);
    const auto col = random_doubles(size_t(c.N * c.C * c.kh * c.kw * g.OH * g.OW), uint32_t(c.kh * 31 + c.W));
    const auto want = col2im_reference(col, g);
    // Each x sums at most T = kh kw column entries; S = the same sums of |col|. float64:
    // gamma_T(2^-53) S for the kernel and as much for the reference's own order. float32:
    // the inputs' rounding to float32 and T - 1 adds, gamma_T(2^-24) S. float16: inputs
    // rounded (2^-11 |col|), summed in float (gamma_T(2^-24) S), rounded once (2^-11 |x|).
    std::vector<double> abs_col(col.size());
    for (size_t i = 0; i < col.size(); ++i) abs_col[i] = std::abs(col[i]);
    const std::vector<double> S = col2im_reference(abs_col, g);
    const double T = double(c.kh * c.kw), ud = 0x1p-53, uf = 0x1p-24, uh = 0x1p-11;
    // bf16 from float32 columns (conv2d's 16-bit path): inputs rounded to float32, summed
    // in float, rounded once (2^-8 |x|).
    const double ub = 0x1p-8;
    std::vector<double> tol64(S.size()), tol32(S.size()), tol16(S.size()), tolb(S.size());
    for (size_t i = 0; i < S.size(); ++i) {
      tol64[i] = 2 * gamma_n(T, ud) * S[i];
      tol32[i] = (gamma_n(T, uf) + gamma_n(T, ud)) * S[i];
      tol16[i] = uh * std::abs(want[i]) + ((1 + uh) * (uh + gamma_n(T, uf)) + gamma_n(T, ud)) * S[i];
      tolb[i] = ub * std::abs(want[i]) + ((1 + ub) * (uf + gamma_n(T, uf)) + gamma_n(T, ud)) * S[i];
    }
    DeviceArray<double> dcol(col), x64(want.size());
    col2im(dcol.data(), x64.data(), g, nullptr);
    EXPECT_TRUE(all_within(x64.host(), want, tol64));
    DeviceArray<float> dcolf(from_doubles<float>(col), 1), xf(want.size(), 1);
    col2im(dcolf.data(), xf.data(), g, nullptr);
    EXPECT_TRUE(all_within(xf.host(), want, tol32));
    DeviceArray<__half> dcolh(from_doubles<__half>(col)), xh(want.size());
    col2im(dcolh.data(), xh.data(), g, nullptr);
    EXPECT_TRUE(all_within(xh.host(), want, tol16));
    DeviceArray<__nv_bfloat16> xb(want.size());
    col2im(dcolf.data(), xb.data(), g, nullptr);
    EXPECT_TRUE(all_within(xb.host(), want, tolb));
  }
}

// im2col's layout is the one ember's conv2d uses: conv2d(x, w) = w [O, C*kh*kw] @ col.
TEST(CudaIm2col, ColumnsTimesWeightsIsConv2d) {
  EMBER_NEED_DEVICE();
  for (const ConvCase& c : kConvCases) {
    if (c.N == 0) continue;
    SCOPED_TRACE(str(c));
    const Im2colGeometry g = geometry(c);
    const int64_t O = 5, K = c.C * c.kh * c.kw, P = g.OH * g.OW;
    const auto x = random_doubles(size_t(c.N * c.C * c.H * c.W), 11);
    const auto w = random_doubles(size_t(O * K), 12);
    DeviceArray<double> dx(x), col(size_t(c.N * K * P));
    im2col(dx.data(), col.data(), g, nullptr);
    const std::vector<double> cols = col.host();
    std::vector<double> y(size_t(c.N * O * P), 0.0), S(y.size(), 0.0);
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t o = 0; o < O; ++o)
        for (int64_t k = 0; k < K; ++k)
          for (int64_t p = 0; p < P; ++p) {
            const double t = w[size_t(o * K + k)] * cols[size_t((n * K + k) * P + p)];
            y[size_t((n * O + o) * P + p)] += t;
            S[size_t((n * O + o) * P + p)] += std::abs(t);
          }
    const Tensor want = conv2d(tensor(x, {c.N, c.C, c.H, c.W}, kFloat64), tensor(w, {O, c.C, c.kh, c.kw}, kFloat64), {},
                               {c.sh, c.sw}, {c.ph, c.pw}, {c.dh, c.dw});
    ASSERT_EQ(want.shape(), (Shape{c.N, O, g.OH, g.OW}));
    // Two float64 sums of the same K products in different orders: gamma_K(2^-53) S each.
    std::vector<double> tol(S.size());
    for (size_t i = 0; i < S.size(); ++i) tol[i] = 2 * gamma_n(double(K), 0x1p-53) * S[i];
    EXPECT_TRUE(all_within(y, want.to_vector<double>(), tol));
  }
}

TEST(CudaIm2col, BadGeometryIsAnError) {
  EMBER_NEED_DEVICE();
  EXPECT_THROW(im2col_geometry(1, 1, 2, 2, 5, 1, 1, 1, 0, 0, 1, 1), Error);  // kernel taller than the input
  EXPECT_THROW(im2col_geometry(1, 1, 4, 4, 3, 3, 0, 1, 0, 0, 1, 1), Error);  // stride 0
  EXPECT_THROW(im2col_geometry(1, 1, 4, 4, 3, 3, 1, 1, -1, 0, 1, 1), Error);
}

}  // namespace
}  // namespace ember::kernels::cuda::test
