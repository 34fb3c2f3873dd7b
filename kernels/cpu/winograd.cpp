// Winograd F(4x4, 3x3) convolutions (kernels/cpu/winograd.h).
//
// Layout. The transforms run on kLanes channels at once, as one vector: an image's block
// of kLanes channels is first packed channel-innermost ([row][col][lane], zero-padded),
// so that each element of a tile's 6x6 patch is one contiguous vector load. Images are
// processed in chunks of whole images (one chunk per task of the thread pool); in a
// chunk, with T tiles in all and channels padded to whole vectors (Cp, Op),
//   V[T][36][Cp]  the transformed input tiles, B^T d B (a tile's 36 rows together, so
//                 the transforms write and read one compact block per tile),
//   U[36][Cp][Op] the transformed filters, G g G^T,
//   M[T][36][Op]  their products, one GEMM M[k] = V[k] U[k] per position k of the 6x6
//                 transform (V[k] and M[k] are matrices with rows 36 vectors apart),
// after which A^T M A gives each 4x4 output tile for kLanes output channels at once.
#include "kernels/cpu/winograd.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "kernels/cpu/channel_pack.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/scratch.h"

namespace ember::kernels::cpu {
namespace {

constexpr int64_t kLanes = kPackLanes;
// Tiles per chunk: V and M of a chunk (36 x 64 x 96 floats for 32 -> 64 channels,
// 0.8 MiB) stay near the core. Measured on the CNN's second layer, batch 128, 8 to 128
// tiles per chunk interleaved in one process (AMD EPYC Zen 1, 512 KiB L2, medians of
// 21): 64 was the fastest or within noise of it at 1 and 2 threads; 128 lost 25-30% of
// the forward and 15% of the backward (at 2 threads 45%). With gemm()'s OpenBLAS on an
// AVX-512 Xeon (1-2 MiB L2), 128 had been fastest there; the products no longer need
// large chunks to run at speed (Note [Winograd products]).
constexpr int64_t kTilesPerChunk = 64;

template <class T>
struct VecOf {
  typedef T type __attribute__((vector_size(kLanes * sizeof(T))));
};
template <class T>
using Vec = typename VecOf<T>::type;

template <class T>
inline Vec<T> load(const T* p) {
  Vec<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
inline void store(T* p, const Vec<T>& v) {
  std::memcpy(p, &v, sizeof v);
}

// B^T (6x6) on d[0..5] (elements s apart), into v[0..5] (elements t apart).
template <class V>
inline void bt(const V* d, int s, V* v, int t) {
  const V d0 = d[0], d1 = d[s], d2 = d[2 * s], d3 = d[3 * s], d4 = d[4 * s], d5 = d[5 * s];
  v[0] = 4 * d0 - 5 * d2 + d4;
  v[t] = -4 * (d1 + d2) + d3 + d4;
  v[2 * t] = 4 * (d1 - d2) - d3 + d4;
  v[3 * t] = 2 * (d3 - d1) - d2 + d4;
  v[4 * t] = 2 * (d1 - d3) - d2 + d4;
  v[5 * t] = 4 * d1 - 5 * d3 + d5;
}

// A^T (4x6) on m[0..5].
template <class V>
inline void at(const V* m, int s, V* y, int t) {
  const V a = m[s] + m[2 * s], b = m[s] - m[2 * s], c = m[3 * s] + m[4 * s], d = m[3 * s] - m[4 * s];
  y[0] = m[0] + a + c;
  y[t] = b + 2 * d;
  y[2 * t] = a + 4 * c;
  y[3 * t] = b + 8 * d + m[5 * s];
}

// A (6x4) on y[0..3]: the adjoint of `at`, for the output gradient in the weight gradient.
template <class V>
inline void a6(const V* y, int s, V* m, int t) {
  const V e = y[0] + y[2 * s], o = y[s] + y[3 * s], e4 = y[0] + 4 * y[2 * s], o8 = 2 * y[s] + 8 * y[3 * s];
  m[0] = y[0];
  m[t] = e + o;
  m[2 * t] = e - o;
  m[3 * t] = e4 + o8;
  m[4 * t] = e4 - o8;
  m[5 * t] = y[3 * s];
}

// G (6x3) on g[0..2].
template <class T>
void g6(const T* g, int s, T* u, int t) {
  const T g0 = g[0], g1 = g[s], g2 = g[2 * s];
  u[0] = g0 / 4;
  u[t] = -(g0 + g1 + g2) / 6;
  u[2 * t] = -(g0 - g1 + g2) / 6;
  u[3 * t] = g0 / 24 + g1 / 12 + g2 / 6;
  u[4 * t] = g0 / 24 - g1 / 12 + g2 / 6;
  u[5 * t] = g2;
}

// G^T (3x6) on u[0..5]: the adjoint of g6.
template <class T>
void gt3(const T* u, int s, T* g, int t) {
  const T u0 = u[0], u1 = u[s], u2 = u[2 * s], u3 = u[3 * s], u4 = u[4 * s], u5 = u[5 * s];
  g[0] = u0 / 4 - (u1 + u2) / 6 + (u3 + u4) / 24;
  g[t] = (u2 - u1) / 6 + (u3 - u4) / 12;
  g[2 * t] = (u3 + u4 - u1 - u2) / 6 + u5;
}

// Tiling of one image: th x tw output tiles of 4x4, the input patches they read from a
// zero-padded PH x PW plane, their outputs in a QH x QW plane.
struct Tiling {
  int64_t H, W, OH, OW, ph, pw;
  int64_t th, tw, tiles, PH, PW, QH, QW;
  Tiling(int64_t H_, int64_t W_, int64_t OH_, int64_t OW_, int64_t ph_, int64_t pw_)
      : H(H_), W(W_), OH(OH_), OW(OW_), ph(ph_), pw(pw_) {
    th = (OH + 3) / 4;
    tw = (OW + 3) / 4;
    tiles = th * tw;
    PH = 4 * th + 2;
    PW = 4 * tw + 2;
    QH = 4 * th;
    QW = 4 * tw;
  }
};

// Where a chunk's transformed tiles go: element (k, t, lane) of block `data` at
// data[k * kstride + t * tstride + lane] (kstride = T x padded channels, tstride = padded channels).
template <class T>
struct TileMatrix {
  T* data;
  int64_t kstride, tstride;
  T* at(int k, int64_t t) const { return data + k * kstride + t * tstride; }
};

// (B^T d B) of every tile of a packed image (PH x PW x kLanes), to tiles col, col + 1, ...
template <class T>
void input_transform(const T* packed, const Tiling& t, const TileMatrix<T>& V, int64_t col) {
  using V_ = Vec<T>;
  for (int64_t q = 0; q < t.tiles; ++q) {
    const T* base = packed + (4 * (q / t.tw) * t.PW + 4 * (q % t.tw)) * kLanes;
    V_ u[6][6];
#pragma GCC unroll 6
    for (int j = 0; j < 6; ++j) {  // columns: u = B^T d
      V_ d[6];
#pragma GCC unroll 6
      for (int i = 0; i < 6; ++i) d[i] = load(base + (i * t.PW + j) * kLanes);
      bt(d, 1, &u[0][j], 6);
    }
#pragma GCC unroll 6
    for (int i = 0; i < 6; ++i) {  // rows: v = u B, straight to V
      V_ v[6];
      bt(u[i], 1, v, 1);
#pragma GCC unroll 6
      for (int j = 0; j < 6; ++j) store(V.at(6 * i + j, col + q), v[j]);
    }
  }
}

// (A^T m A) of every tile, from tiles col, col + 1, ... of M, into a packed output plane
// (QH x QW x kLanes).
template <class T>
void output_transform(const TileMatrix<T>& M, int64_t col, const Tiling& t, T* packed) {
  using V_ = Vec<T>;
  for (int64_t q = 0; q < t.tiles; ++q) {
    V_ s[4][6];
#pragma GCC unroll 6
    for (int j = 0; j < 6; ++j) {  // columns: s = A^T m
      V_ m[6];
#pragma GCC unroll 6
      for (int i = 0; i < 6; ++i) m[i] = load(M.at(6 * i + j, col + q));
      at(m, 1, &s[0][j], 6);
    }
    T* base = packed + (4 * (q / t.tw) * t.QW + 4 * (q % t.tw)) * kLanes;
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {  // rows: y = s A, straight to the packed output
      V_ y[4];
      at(s[i], 1, y, 1);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) store(base + (i * t.QW + j) * kLanes, y[j]);
    }
  }
}

// (A dY A^T) of every 4x4 tile of a packed output gradient (QH x QW x kLanes).
template <class T>
void grad_transform(const T* packed, const Tiling& t, const TileMatrix<T>& M, int64_t col) {
  using V_ = Vec<T>;
  for (int64_t q = 0; q < t.tiles; ++q) {
    const T* base = packed + (4 * (q / t.tw) * t.QW + 4 * (q % t.tw)) * kLanes;
    V_ u[6][4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {  // columns: u = A dY
      V_ y[4];
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) y[i] = load(base + (i * t.QW + j) * kLanes);
      a6(y, 1, &u[0][j], 4);
    }
#pragma GCC unroll 6
    for (int i = 0; i < 6; ++i) {  // rows: m = u A^T, straight to M
      V_ m[6];
      a6(u[i], 1, m, 1);
#pragma GCC unroll 6
      for (int j = 0; j < 6; ++j) store(M.at(6 * i + j, col + q), m[j]);
    }
  }
}

int64_t round_lanes(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

// Note [Winograd products]. The 36 products of a chunk, M[k] = V[k] U[k] and
// dU[k] += M[k]^T V[k], are short (their k and n are the channels or a chunk's tiles) with
// a right-hand side of about 8 KiB that stays in L1. gemm() sent them to OpenBLAS, which
// packs both sides, zeroes C and copies before every call: in a CNN epoch on the
// AVX2-only EPYC (Zen 1) those passes took 13% of the time, its kernel 31%. This kernel
// reads both sides where they lie: a tile of kTileRows rows of C by kTileRegs registers
// stays in registers while i runs over k, each step one load of B per register and one
// broadcast of A per row. Each element of C is summed over i in order, so a row's result
// depends neither on the other rows (the batch) nor on the thread count. A named
// EMBER_GEMM variant sends the products to gemm() instead (to compare the two).

// The kernel's registers are the machine's own vectors (GCC keeps a Vec, wider than
// AVX2's, on the stack inside a loop like this one).
#if defined(__AVX512F__)
constexpr int kRegBytes = 64;
#else
constexpr int kRegBytes = 32;
#endif
template <class T>
struct RegOf {
  typedef T type __attribute__((vector_size(kRegBytes)));
};
template <class T>
using Reg = typename RegOf<T>::type;
template <class T>
constexpr int64_t kRegLanes = kRegBytes / sizeof(T);
// Tiles of 6 rows by 2 registers on AVX2 (12 accumulators, enough to hide the FMA latency,
// with room in its 16 registers for the loads of B and the broadcast of A) and by 4 on
// AVX-512 (24 of its 32). On the AMD EPYC (Zen 4), the CNN's conv2 forward ran 2-3% behind
// OpenBLAS's small-matrix kernel with 6 x 4, 4-6% with 8 x 2 and 7% with 6 x 2 (12 x 2,
// 8 x 3, 5 x 4 and 4 x 4 were no better); on the AVX2-only EPYC (Zen 1), 6 x 2 beat 4 x 3,
// 3 x 4, 5 x 2 and 8 x 1.
#if defined(__AVX512F__)
constexpr int kTileRows = 6, kTileRegs = 4;
#else
constexpr int kTileRows = 6, kTileRegs = 2;
#endif

// C[r][v] (+)= sum over i < k of A(r, i) B[i][v] for the R x NV tile of registers, A(r, i)
// at a[r * ar + i * ai].
template <class T, int R, int NV>
void product_tile(int64_t k, const T* a, int64_t ar, int64_t ai, const T* b, int64_t ldb, T* c, int64_t ldc,
                  bool acc) {
  constexpr int64_t L = kRegLanes<T>;
  Reg<T> s[R][NV];  // the unrolled loops keep it in registers
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      s[r][v] = Reg<T>{};
      if (acc) std::memcpy(&s[r][v], c + r * ldc + v * L, sizeof(Reg<T>));
    }
  for (int64_t i = 0; i < k; ++i) {
    Reg<T> bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) std::memcpy(&bv[v], b + i * ldb + v * L, sizeof(Reg<T>));
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const T x = a[r * ar + i * ai];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) s[r][v] += x * bv[v];
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) std::memcpy(c + r * ldc + v * L, &s[r][v], sizeof(Reg<T>));
}

// The last rows < R of a column block.
template <class T, int NV, int R = kTileRows - 1>
void product_rows(int64_t rows, int64_t k, const T* a, int64_t ar, int64_t ai, const T* b, int64_t ldb, T* c,
                  int64_t ldc, bool acc) {
  if constexpr (R > 0) {
    if (rows == R) return product_tile<T, R, NV>(k, a, ar, ai, b, ldb, c, ldc, acc);
    product_rows<T, NV, R - 1>(rows, k, a, ar, ai, b, ldb, c, ldc, acc);
  }
}

template <class T, int NV>
void product_block(int64_t m, int64_t k, const T* a, int64_t ar, int64_t ai, const T* b, int64_t ldb, T* c,
                   int64_t ldc, bool acc) {
  int64_t r = 0;
  for (; r + kTileRows <= m; r += kTileRows)
    product_tile<T, kTileRows, NV>(k, a + r * ar, ar, ai, b, ldb, c + r * ldc, ldc, acc);
  product_rows<T, NV>(m - r, k, a + r * ar, ar, ai, b, ldb, c + r * ldc, ldc, acc);
}

// The last registers < NV of the columns.
template <class T, int NV = kTileRegs - 1>
void product_cols(int64_t regs, int64_t m, int64_t k, const T* a, int64_t ar, int64_t ai, const T* b, int64_t ldb,
                  T* c, int64_t ldc, bool acc) {
  if constexpr (NV > 0) {
    if (regs == NV) return product_block<T, NV>(m, k, a, ar, ai, b, ldb, c, ldc, acc);
    product_cols<T, NV - 1>(regs, m, k, a, ar, ai, b, ldb, c, ldc, acc);
  }
}

// C[m][n] (+)= op(A) B as gemm() (row-major, op(A) = A or A^T), for n a whole number of
// vectors; Note [Winograd products].
template <class T>
void winograd_product(bool ta, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
                      T* c, int64_t ldc, bool acc, bool parallel) {
  if (gemm_variant() != GemmVariant::Auto)
    return gemm<T>(ta, false, m, n, k, a, lda, b, ldb, c, ldc, acc, parallel);
  constexpr int64_t L = kRegLanes<T>;
  static_assert(kLanes % L == 0, "a row of C is a whole number of registers");
  const int64_t ar = ta ? 1 : lda, ai = ta ? lda : 1, regs = n / L;
  int64_t v = 0;
  for (; v + kTileRegs <= regs; v += kTileRegs)
    product_block<T, kTileRegs>(m, k, a, ar, ai, b + v * L, ldb, c + v * L, ldc, acc);
  product_cols<T>(regs - v, m, k, a, ar, ai, b + v * L, ldb, c + v * L, ldc, acc);
}

// Splits N images into chunks of about kTilesPerChunk tiles, whole rounds of the pool.
int64_t chunk_count(int64_t N, int64_t tiles) {
  const int64_t threads = num_threads();
  int64_t chunks = std::max<int64_t>((N * tiles + kTilesPerChunk - 1) / kTilesPerChunk, threads);
  chunks = (chunks + threads - 1) / threads * threads;
  return std::clamp<int64_t>(chunks, 1, std::max<int64_t>(N, 1));
}

// Transformed filters U[g][k][i][o] (i < Ip inputs, o < Op outputs, zero-padded) of the
// convolution from `ins` to `outs` channels per group, in the compute type C; filter (o, i)
// of group g is the 3x3 at w + g * gstride + o * ostride + i * istride, elements (r, s) at
// r * rs + s * ss.
template <class T, class C>
void transform_filters(const T* w, int64_t G, int64_t outs, int64_t ins, int64_t gstride, int64_t ostride,
                       int64_t istride, int rs, int ss, C* U) {
  const int64_t Ip = round_lanes(ins), Op = round_lanes(outs), plane = Ip * Op;
  std::fill(U, U + G * 36 * plane, C(0));
  for (int64_t g = 0; g < G; ++g)
    for (int64_t o = 0; o < outs; ++o)
      for (int64_t i = 0; i < ins; ++i) {
        const T* f = w + g * gstride + o * ostride + i * istride;
        C f3[3][3], tmp[6][3];
        for (int r = 0; r < 3; ++r)
          for (int c = 0; c < 3; ++c) f3[r][c] = cast<C>(f[r * rs + c * ss]);
        for (int c = 0; c < 3; ++c) g6(&f3[0][c], 3, &tmp[0][c], 3);  // G f: columns
        C* u = U + g * 36 * plane + i * Op + o;                        // element k at u[k * plane]
        for (int r = 0; r < 6; ++r) g6(tmp[r], 1, u + 6 * r * plane, static_cast<int>(plane));  // (G f) G^T: rows
      }
}

// y[n, g*outs + o] = sum over i of conv3x3(x[n, g*ins + i], filter (o, i)) + bias[g*outs + o],
// with the filters transformed by transform_filters, then max(0, .) when relu. T is the
// tensors' type; the transforms and products run in C (float for the 16-bit floats).
template <class T, class C = compute_t<T>>
void winograd_conv_typed(const T* x, int64_t N, int64_t G, int64_t ins, int64_t H, int64_t W, const C* U,
                         int64_t outs, const T* bias, bool relu, int64_t ph, int64_t pw, T* y, int64_t OH, int64_t OW) {
  const Tiling t(H, W, OH, OW, ph, pw);
  const int64_t Ip = round_lanes(ins), Op = round_lanes(outs), chunks = chunk_count(N, t.tiles);
  parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    const bool parallel_gemm = chunks == 1;
    for (int64_t ch = c0; ch < c1; ++ch) {
      const int64_t n0 = N * ch / chunks, n1 = N * (ch + 1) / chunks, T_ = (n1 - n0) * t.tiles;
      if (T_ == 0) continue;
      Scratch<C> Vs(36 * T_ * Ip), Ms(36 * T_ * Op);
      Scratch<C> in_packed(t.PH * t.PW * kLanes), out_packed((t.QH * t.QW + kLanes) * kLanes);
      std::fill(in_packed.data(), in_packed.data() + t.PH * t.PW * kLanes, C(0));  // the border stays zero
      for (int64_t g = 0; g < G; ++g) {
        for (int64_t n = n0; n < n1; ++n)
          for (int64_t i0 = 0; i0 < ins; i0 += kLanes) {
            pack_channels(x + ((n * G + g) * ins + i0) * H * W, H * W, std::min(kLanes, ins - i0), H, W, ph, pw, t.PW,
                          in_packed.data());
            input_transform(in_packed.data(), t, TileMatrix<C>{Vs.data() + i0, Ip, 36 * Ip}, (n - n0) * t.tiles);
          }
        for (int k = 0; k < 36; ++k)
          winograd_product<C>(false, T_, Op, Ip, Vs.data() + k * Ip, 36 * Ip, U + (g * 36 + k) * Ip * Op, Op,
                              Ms.data() + k * Op, 36 * Op, false, parallel_gemm);
        for (int64_t n = n0; n < n1; ++n)
          for (int64_t o0 = 0; o0 < outs; o0 += kLanes) {
            output_transform(TileMatrix<C>{Ms.data() + o0, Op, 36 * Op}, (n - n0) * t.tiles, t, out_packed.data());
            unpack_channels(out_packed.data(), t.QW, std::min(kLanes, outs - o0), OH, OW,
                            bias ? bias + g * outs + o0 : nullptr, relu, y + ((n * G + g) * outs + o0) * OH * OW,
                            OH * OW);
          }
      }
    }
  });
}

template <class T>
void forward_typed(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor& bias,
                   const Conv2dParams& p) {
  const int64_t N = in.shape()[0], C = in.shape()[1], H = in.shape()[2], W = in.shape()[3];
  const int64_t O = weight.shape()[0], G = p.groups, Cg = C / G, Og = O / G;
  Scratch<compute_t<T>> U(G * 36 * round_lanes(Cg) * round_lanes(Og));
  // filter (o, c) of group g: w[g*Og + o][c], rows 3 apart.
  transform_filters(static_cast<const T*>(weight.data_ptr()), G, Og, Cg, Og * Cg * 9, Cg * 9, 9, 3, 1, U.data());
  winograd_conv_typed<T>(static_cast<const T*>(in.data_ptr()), N, G, Cg, H, W, U.data(), Og,
                         bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr, p.relu, p.padding[0],
                         p.padding[1],
                         static_cast<T*>(out.data_ptr()), out.shape()[2], out.shape()[3]);
}

// grad_x = conv(grad_y, w'), w'[c][o] = w[o][c] turned by 180 degrees, padding 2 - p.
template <class T>
void backward_input_typed(const Tensor& gin, const Tensor& gout, const Tensor& weight, const Conv2dParams& p) {
  const int64_t N = gin.shape()[0], C = gin.shape()[1], H = gin.shape()[2], W = gin.shape()[3];
  const int64_t O = weight.shape()[0], G = p.groups, Cg = C / G, Og = O / G;
  Scratch<compute_t<T>> U(G * 36 * round_lanes(Og) * round_lanes(Cg));  // per group: [36][Og (inputs)][Cg (outputs)]
  // filter (c, o) of group g: w[g*Og + o][c] read from its last element backwards.
  transform_filters(static_cast<const T*>(weight.data_ptr()) + 8, G, Cg, Og, Og * Cg * 9, 9, Cg * 9, -3, -1,
                    U.data());
  winograd_conv_typed<T>(static_cast<const T*>(gout.data_ptr()), N, G, Og, gout.shape()[2], gout.shape()[3], U.data(),
                         Cg, nullptr, false, 2 - p.padding[0], 2 - p.padding[1], static_cast<T*>(gin.data_ptr()), H, W);
}

// grad_w[o][c] = G^T (sum over tiles of (A dY A^T) . (B^T d B)) G: per chunk
// dU[k] += Mdy[k]^T V[k], the chunks' sums added at the end.
template <class T>
void backward_weight_typed(const Tensor& gw, const Tensor& gb, const Tensor& gout, const Tensor& in,
                           const Conv2dParams& p) {
  using C_ = compute_t<T>;  // the transforms' and products' type
  const int64_t N = in.shape()[0], C = in.shape()[1], H = in.shape()[2], W = in.shape()[3];
  const int64_t O = gw.shape()[0], G = p.groups, Cg = C / G, Og = O / G;
  const int64_t OH = gout.shape()[2], OW = gout.shape()[3];
  const T* x = static_cast<const T*>(in.data_ptr());
  const T* gy = static_cast<const T*>(gout.data_ptr());
  const Tiling t(H, W, OH, OW, p.padding[0], p.padding[1]);
  const int64_t Cp = round_lanes(Cg), Op = round_lanes(Og), chunks = chunk_count(N, t.tiles);
  const int64_t usize = G * 36 * Op * Cp + O;  // dU[g][k][o][c], then the bias gradient
  // One dU per task of the pool (not per chunk): a task sums its chunks into its own.
  const int64_t parts = std::min<int64_t>(num_threads(), chunks);
  Scratch<C_> dU(parts * usize);
  parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
    const bool parallel_gemm = parts == 1;
    for (int64_t part = p0; part < p1; ++part) {
      C_* du = dU.data() + part * usize;
      std::fill(du, du + usize, C_(0));
      for (int64_t ch = chunks * part / parts; ch < chunks * (part + 1) / parts; ++ch) {
        const int64_t n0 = N * ch / chunks, n1 = N * (ch + 1) / chunks, T_ = (n1 - n0) * t.tiles;
        if (T_ == 0) continue;
        Scratch<C_> Vs(36 * T_ * Cp), Ms(36 * T_ * Op);
        Scratch<C_> x_packed(t.PH * t.PW * kLanes), gy_packed(t.QH * t.QW * kLanes);
        std::fill(x_packed.data(), x_packed.data() + t.PH * t.PW * kLanes, C_(0));  // the borders stay zero
        std::fill(gy_packed.data(), gy_packed.data() + t.QH * t.QW * kLanes, C_(0));
        for (int64_t g = 0; g < G; ++g) {
          for (int64_t n = n0; n < n1; ++n) {
            for (int64_t c0_ = 0; c0_ < Cg; c0_ += kLanes) {
              pack_channels(x + ((n * G + g) * Cg + c0_) * H * W, H * W, std::min(kLanes, Cg - c0_), H, W, t.ph, t.pw,
                            t.PW, x_packed.data());
              input_transform(x_packed.data(), t, TileMatrix<C_>{Vs.data() + c0_, Cp, 36 * Cp}, (n - n0) * t.tiles);
            }
            for (int64_t o0 = 0; o0 < Og; o0 += kLanes) {
              const T* planes = gy + ((n * G + g) * Og + o0) * OH * OW;
              pack_channels(planes, OH * OW, std::min(kLanes, Og - o0), OH, OW, 0, 0, t.QW, gy_packed.data());
              grad_transform(gy_packed.data(), t, TileMatrix<C_>{Ms.data() + o0, Op, 36 * Op}, (n - n0) * t.tiles);
              if (gb.defined())  // the planes are in cache now
                for (int64_t l = 0; l < std::min(kLanes, Og - o0); ++l)
                  du[usize - O + g * Og + o0 + l] += C_(sum_run<double>(planes + l * OH * OW, OH * OW));
            }
          }
          for (int k = 0; k < 36; ++k)
            winograd_product<C_>(true, Op, Cp, T_, Ms.data() + k * Op, 36 * Op, Vs.data() + k * Cp, 36 * Cp,
                                 du + (g * 36 + k) * Op * Cp, Cp, true, parallel_gemm);
        }
      }
    }
  });
  for (int64_t part = 1; part < parts; ++part)
    for (int64_t i = 0; i < usize; ++i) dU[i] += dU[part * usize + i];
  if (gb.defined())
    for (int64_t o = 0; o < O; ++o) static_cast<T*>(gb.data_ptr())[o] = cast<T>(dU[usize - O + o]);
  T* out = static_cast<T*>(gw.data_ptr());
  const int64_t plane = Op * Cp;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t o = 0; o < Og; ++o)
      for (int64_t c = 0; c < Cg; ++c) {
        const C_* u = dU.data() + g * 36 * plane + o * Cp + c;  // element k at u[k * plane]
        C_ tmp[6][3], g3[3][3];                                 // u G: rows
        for (int r = 0; r < 6; ++r) gt3(u + 6 * r * plane, static_cast<int>(plane), tmp[r], 1);
        for (int s = 0; s < 3; ++s) gt3(&tmp[0][s], 3, &g3[0][s], 3);  // G^T (u G): columns
        T* dst = out + ((g * Og + o) * Cg + c) * 9;
        for (int r = 0; r < 3; ++r)
          for (int s = 0; s < 3; ++s) dst[r * 3 + s] = cast<T>(g3[r][s]);
      }
}

template <class F>
void by_dtype(DType dtype, const char* op, const F& f) {
  if (dtype == DType::Float32) return f(float{});
  if (dtype == DType::Float64) return f(double{});
  if (dtype == DType::BFloat16) return f(BFloat16{});
  if (dtype == DType::Float16) return f(Half{});
  EMBER_FAIL(op, " (winograd): dtype ", dtype_name(dtype), " is not supported on the cpu");
}

}  // namespace

bool winograd_supported(const Conv2dParams& p, int64_t kh, int64_t kw) {
  return kh == 3 && kw == 3 && p.stride[0] == 1 && p.stride[1] == 1 && p.dilation[0] == 1 && p.dilation[1] == 1 &&
         p.padding[0] <= 2 && p.padding[1] <= 2;
}

void winograd_conv2d(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor& bias,
                     const Conv2dParams& p) {
  by_dtype(in.dtype(), "conv2d", [&](auto v) { forward_typed<decltype(v)>(out, in, weight, bias, p); });
}

void winograd_conv2d_backward_input(const Tensor& gin, const Tensor& gout, const Tensor& weight,
                                    const Conv2dParams& p) {
  by_dtype(gin.dtype(), "conv2d_backward_input", [&](auto v) { backward_input_typed<decltype(v)>(gin, gout, weight, p); });
}

void winograd_conv2d_backward_weight(const Tensor& gw, const Tensor& gb, const Tensor& gout, const Tensor& in,
                                     const Conv2dParams& p) {
  by_dtype(gw.dtype(), "conv2d_backward_weight",
           [&](auto v) { backward_weight_typed<decltype(v)>(gw, gb, gout, in, p); });
}

std::vector<std::size_t> winograd_scratch(ConvPass pass, const Shape& in, const Shape& weight, const Shape& out,
                                          DType dtype, const Conv2dParams& p) {
  const std::size_t c = dtype == DType::Float64 ? sizeof(double) : sizeof(float);  // compute_t
  const int64_t N = in[0], G = p.groups, Cg = in[1] / G, Og = weight[0] / G, O = weight[0];
  const int64_t H = in[2], W = in[3], OH = out[2], OW = out[3];
  std::vector<std::size_t> blocks;
  auto add = [&](int64_t elements) { blocks.push_back(static_cast<std::size_t>(elements) * c); };
  if (pass == ConvPass::kBackwardWeight) {
    const Tiling t(H, W, OH, OW, p.padding[0], p.padding[1]);
    const int64_t Cp = round_lanes(Cg), Op = round_lanes(Og), chunks = chunk_count(N, t.tiles);
    const int64_t parts = std::min<int64_t>(num_threads(), chunks), T_ = (N + chunks - 1) / chunks * t.tiles;
    add(parts * (G * 36 * Op * Cp + O));
    for (int64_t i = 0; i < parts; ++i) {
      add(36 * T_ * Cp), add(36 * T_ * Op);
      add(t.PH * t.PW * kLanes), add(t.QH * t.QW * kLanes);
    }
    return blocks;
  }
  // Forward: Cg to Og channels over H x W; backward input: Og to Cg over OH x OW, padding 2 - p.
  const bool fwd = pass == ConvPass::kForward;
  const int64_t ins = fwd ? Cg : Og, outs = fwd ? Og : Cg;
  const Tiling t = fwd ? Tiling(H, W, OH, OW, p.padding[0], p.padding[1])
                       : Tiling(OH, OW, H, W, 2 - p.padding[0], 2 - p.padding[1]);
  const int64_t Ip = round_lanes(ins), Op = round_lanes(outs), chunks = chunk_count(N, t.tiles);
  const int64_t tasks = std::min<int64_t>(num_threads(), chunks), T_ = (N + chunks - 1) / chunks * t.tiles;
  add(G * 36 * Ip * Op);
  for (int64_t i = 0; i < tasks; ++i) {
    add(36 * T_ * Ip), add(36 * T_ * Op);
    add(t.PH * t.PW * kLanes), add((t.QH * t.QW + kLanes) * kLanes);
  }
  return blocks;
}

}  // namespace ember::kernels::cpu
