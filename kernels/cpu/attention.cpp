// Fused attention on the CPU (the attention / attention_backward stubs of core/dispatch.h):
// FlashAttention-2's tiled online softmax, so memory stays linear in the sequence length.
//
// Forward, per task (bh, block of kBr queries): the queries (times scale) are packed into
// a tile; each block of kBc keys is packed transposed, the kBr x kBc scores come from a
// register-blocked product, and the online softmax keeps per row only the running max m,
// the sum l and the unnormalized output. The result is out = O / l and lse = m + log l;
// nothing of size L x S is ever stored. Causal key blocks past the query block's last row
// are skipped.
//
// Backward recomputes the probabilities P = exp(S - lse) block by block, with
// D = rowsum(dout * out) computed first (dS = P (dP - D), dP = dout v^T). Two passes keep
// it deterministic without atomics: one per (bh, key block) accumulates dk and dv over
// all query blocks, one per (bh, query block) accumulates dq over all key blocks.
//
// Dropout regenerates its mask from the Philox counters (kernels/common/attention_ops.h);
// the kept weights are scaled by 1 / (1 - p) and lse is that of the weights before dropout.
// float32 tiles run on vec.h (AVX-512 or AVX2); float64, and builds without either, take
// plain loops. 16-bit inputs are packed into float32 tiles.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/common/attention_ops.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/vec.h"
#include "kernels/cpu/vec_math.h"

namespace ember::kernels::cpu {
namespace {

constexpr int64_t kBr = 64;   // queries per block
constexpr int64_t kBc = 64;   // keys per block: 4 AVX-512 vectors, the width of a score tile's row
constexpr int64_t kPad = 16;  // tile rows are padded to whole vectors of either width

int64_t padded(int64_t n) { return (n + kPad - 1) / kPad * kPad; }

// Block t of n in the order 0, n-1, 1, n-2, ...: causal blocks grow in work along one
// end, and parallel_for hands each thread a contiguous range of tasks, so the zigzag
// gives every range light and heavy blocks alike.
int64_t zigzag(int64_t t, int64_t n) { return t % 2 == 0 ? t / 2 : n - 1 - t / 2; }

template <class C>
constexpr bool kVec = EMBER_CPU_VEC && std::is_same_v<C, float>;

template <class C>
constexpr C kNegInf = -std::numeric_limits<C>::infinity();

// What one call computes: q [BH, L, E], k [BH, S, E], v [BH, S, Ev] of storage type T;
// the mask (additive, compute type C) at strides mb, ml, ms, or null.
template <class T, class C>
struct Problem {
  const T *q, *k, *v;
  int64_t BH, L, S, E, Ev, Ep, Evp;
  const C* mask;
  int64_t mb, ml, ms;
  C scale;
  bool causal;
  C p;           // dropout probability, 0: none
  C keep_scale;  // 1 / (1 - p)
  uint64_t seed, offset;

  // Keys [0, end) that query rows [i0, i1) can see.
  int64_t key_end(int64_t i1) const { return causal ? std::min(S, i1) : S; }
};

// rows x n of src (leading dim ld) as C times mul into dst (leading dim ldd), zero past
// n and from row `rows` up to `rows_pad`.
template <class T, class C>
void pack_rows(const T* src, int64_t ld, int64_t rows, int64_t n, C mul, C* dst, int64_t ldd, int64_t rows_pad) {
  for (int64_t r = 0; r < rows_pad; ++r) {
    C* d = dst + r * ldd;
    if (r < rows)
      for (int64_t c = 0; c < n; ++c) d[c] = cast<C>(src[r * ld + c]) * mul;
    std::fill(d + (r < rows ? n : 0), d + ldd, C(0));
  }
}

// dst [n, kBc] = src [rows, n]^T, zero from column `rows`.
template <class T, class C>
void pack_transposed(const T* src, int64_t rows, int64_t n, C* dst) {
  for (int64_t c = 0; c < n; ++c) {
    C* d = dst + c * kBc;
    for (int64_t r = 0; r < rows; ++r) d[r] = cast<C>(src[r * n + c]);
    std::fill(d + rows, d + kBc, C(0));
  }
}

// out [rows_pad, kBc] = a [rows_pad, K] (leading dim lda) times bt [K, kBc]; rows_pad is
// a multiple of 4.
template <class C>
void product_tile(const C* a, int64_t lda, int64_t rows_pad, const C* bt, int64_t K, C* out) {
  if constexpr (kVec<C>) {
    using namespace simd;
    for (int64_t i0 = 0; i0 < rows_pad; i0 += 4)
      for (int64_t c0 = 0; c0 < kBc; c0 += 4 * kLanes) {
        Vec acc[4][4];
        for (auto& row : acc)
          for (Vec& x : row) x = zero();
        for (int64_t k = 0; k < K; ++k) {
          const float* b = bt + k * kBc + c0;
          const Vec b0 = load(b), b1 = load(b + kLanes), b2 = load(b + 2 * kLanes), b3 = load(b + 3 * kLanes);
          for (int r = 0; r < 4; ++r) {
            const Vec x = set1(a[(i0 + r) * lda + k]);
            acc[r][0] = fmadd(x, b0, acc[r][0]);
            acc[r][1] = fmadd(x, b1, acc[r][1]);
            acc[r][2] = fmadd(x, b2, acc[r][2]);
            acc[r][3] = fmadd(x, b3, acc[r][3]);
          }
        }
        for (int r = 0; r < 4; ++r)
          for (int v = 0; v < 4; ++v) store(out + (i0 + r) * kBc + c0 + v * kLanes, acc[r][v]);
      }
  } else {
    for (int64_t i = 0; i < rows_pad; ++i) {
      C* o = out + i * kBc;
      std::fill(o, o + kBc, C(0));
      for (int64_t k = 0; k < K; ++k) {
        const C x = a[i * lda + k];
        const C* b = bt + k * kBc;
        for (int64_t j = 0; j < kBc; ++j) o[j] += x * b[j];
      }
    }
  }
}

// out[r, :n] += sum_j w(r, j) rows[j, :n] for r < nr, j < nj, w(r, j) = w[r * wr + j * wc];
// n is a multiple of kPad. Vectorized 4 rows at a time, so each vector of `rows` loaded
// serves 4 rows' FMAs (a row at a time, the loads were as many as the FMAs).
template <class C>
void accumulate(C* out, int64_t ldo, int64_t nr, int64_t n, const C* w, int64_t wr, int64_t wc, int64_t nj,
                const C* rows, int64_t ldr) {
  int64_t r0 = 0;
  if constexpr (kVec<C>) {
    using namespace simd;
    for (; r0 + 4 <= nr; r0 += 4)
      for (int64_t c0 = 0; c0 < n;) {
        const int nv = static_cast<int>(std::min<int64_t>(4, (n - c0) / kLanes));  // vectors in this chunk
        Vec acc[4][4];
        for (int r = 0; r < 4; ++r)
          for (int v = 0; v < 4; ++v) acc[r][v] = v < nv ? load(out + (r0 + r) * ldo + c0 + v * kLanes) : zero();
        if (nv == 4) {
          for (int64_t j = 0; j < nj; ++j) {
            const float* b = rows + j * ldr + c0;
            const Vec b0 = load(b), b1 = load(b + kLanes), b2 = load(b + 2 * kLanes), b3 = load(b + 3 * kLanes);
            for (int r = 0; r < 4; ++r) {
              const Vec x = set1(w[(r0 + r) * wr + j * wc]);
              acc[r][0] = fmadd(x, b0, acc[r][0]);
              acc[r][1] = fmadd(x, b1, acc[r][1]);
              acc[r][2] = fmadd(x, b2, acc[r][2]);
              acc[r][3] = fmadd(x, b3, acc[r][3]);
            }
          }
        } else {
          for (int64_t j = 0; j < nj; ++j)
            for (int v = 0; v < nv; ++v) {
              const Vec b = load(rows + j * ldr + c0 + v * kLanes);
              for (int r = 0; r < 4; ++r) acc[r][v] = fmadd(set1(w[(r0 + r) * wr + j * wc]), b, acc[r][v]);
            }
        }
        for (int r = 0; r < 4; ++r)
          for (int v = 0; v < nv; ++v) store(out + (r0 + r) * ldo + c0 + v * kLanes, acc[r][v]);
        c0 += nv * kLanes;
      }
  }
  for (int64_t r = r0; r < nr; ++r) {
    C* o = out + r * ldo;
    for (int64_t j = 0; j < nj; ++j) {
      const C x = w[r * wr + j * wc];
      if (x == 0) continue;
      const C* b = rows + j * ldr;
      for (int64_t c = 0; c < n; ++c) o[c] += x * b[c];
    }
  }
}

// The max of s[0, kBc) (padding is -inf).
template <class C>
C row_max(const C* s) {
  if constexpr (kVec<C>) {
    simd::Vec m = simd::load(s);
    for (int64_t j = simd::kLanes; j < kBc; j += simd::kLanes) m = simd::max(simd::load(s + j), m);
    alignas(64) float lanes[simd::kLanes];
    simd::store(lanes, m);
    return *std::max_element(lanes, lanes + simd::kLanes);
  } else {
    return *std::max_element(s, s + kBc);
  }
}

// s[j] = exp(s[j] - shift) for j < kBc (0 where s[j] = -inf); returns their sum. vec_math.h's
// exp clamps its argument at -87.3 (giving 1.2e-38): below that the weight is 0 here, so
// that masked keys take no part and a fully masked row sums to 0.
template <class C>
C exp_row(C* s, C shift) {
  if constexpr (kVec<C>) {
    const simd::Vec sh = simd::set1(shift), lo = simd::set1(-87.3365447505531f);
    simd::Vec sum = simd::zero();
    for (int64_t j = 0; j < kBc; j += simd::kLanes) {
      const simd::Vec x = simd::load(s + j) - sh;
      const simd::Vec e = simd::select(simd::greater(lo, x), simd::zero(), simd::exp(x));
      simd::store(s + j, e);
      sum = simd::add(sum, e);
    }
    alignas(64) float lanes[simd::kLanes];
    simd::store(lanes, sum);
    float total = 0;
    for (float x : lanes) total += x;
    return total;
  } else {
    C total = 0;
    for (int64_t j = 0; j < kBc; ++j) total += (s[j] = std::exp(s[j] - shift));
    return total;
  }
}

// The scores of query row i (global) against keys [j0, j0 + kBc) as the softmax takes them:
// plus the mask; -inf for keys past S, past the causal diagonal, or masked.
template <class T, class C>
void mask_row(const Problem<T, C>& P, int64_t bh, int64_t i, int64_t j0, C* s) {
  const int64_t nc = std::min(kBc, P.S - j0);
  if (P.mask) {
    const C* m = P.mask + bh * P.mb + i * P.ml + j0 * P.ms;
    for (int64_t j = 0; j < nc; ++j) s[j] += m[j * P.ms];
  }
  const int64_t end = P.causal ? std::clamp<int64_t>(i + 1 - j0, 0, nc) : nc;
  std::fill(s + end, s + kBc, kNegInf<C>);
}

// Multiplies the n weights of row i from key j0 by dropout's factor: 1 / (1 - p) where
// kept, 0 where dropped. One Philox block serves kPerBlock consecutive weights.
template <class T, class C>
void dropout_row(const Problem<T, C>& P, int64_t bh, int64_t i, int64_t j0, int64_t n, C* w) {
  using D = ops::AttentionDropout<C>;
  const uint64_t first = (static_cast<uint64_t>(bh * P.L + i)) * static_cast<uint64_t>(P.S) + uint64_t(j0);
  uint64_t block = ~uint64_t(0);
  Philox4 r{};
  for (int64_t j = 0; j < n; ++j) {
    const uint64_t e = first + uint64_t(j);
    if (e / D::kPerBlock != block) {
      block = e / D::kPerBlock;
      r = philox_block(P.seed, P.offset + block);
    }
    w[j] *= D::draw(r, static_cast<int>(e % D::kPerBlock)) >= P.p ? P.keep_scale : C(0);
  }
}

template <class T, class C>
void forward_block(const Problem<T, C>& P, int64_t bh, int64_t i0, T* out, C* lse, C* buf) {
  const int64_t rows = std::min(kBr, P.L - i0), rows_pad = (rows + 3) / 4 * 4;
  C *qs = buf, *kt = qs + kBr * P.Ep, *vb = kt + P.E * kBc, *s = vb + kBc * P.Evp;
  C *o = s + kBr * kBc, *m = o + kBr * P.Evp, *l = m + kBr;
  pack_rows(P.q + (bh * P.L + i0) * P.E, P.E, rows, P.E, P.scale, qs, P.Ep, rows_pad);
  std::fill(o, o + rows * P.Evp, C(0));
  std::fill(m, m + rows, kNegInf<C>);
  std::fill(l, l + rows, C(0));
  const int64_t end = P.key_end(i0 + rows);
  for (int64_t j0 = 0; j0 < end; j0 += kBc) {
    const int64_t nc = std::min(kBc, P.S - j0);
    pack_transposed(P.k + (bh * P.S + j0) * P.E, nc, P.E, kt);
    pack_rows(P.v + (bh * P.S + j0) * P.Ev, P.Ev, nc, P.Ev, C(1), vb, P.Evp, nc);
    product_tile(qs, P.Ep, rows_pad, kt, P.E, s);
    for (int64_t r = 0; r < rows; ++r) {
      C* sr = s + r * kBc;
      mask_row(P, bh, i0 + r, j0, sr);
      const C mx = std::max(m[r], row_max(sr));
      const C shift = mx == kNegInf<C> ? C(0) : mx;  // exp(-inf - 0) = 0 where -inf - -inf is NaN
      const C alpha = std::exp(m[r] - shift);
      l[r] = l[r] * alpha + exp_row(sr, shift);
      m[r] = mx;
      if (alpha != C(1))
        for (int64_t c = 0; c < P.Evp; ++c) o[r * P.Evp + c] *= alpha;
      if (P.p > 0) dropout_row(P, bh, i0 + r, j0, nc, sr);
    }
    accumulate(o, P.Evp, rows, P.Evp, s, kBc, 1, nc, vb, P.Evp);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const C inv = l[r] > 0 ? C(1) / l[r] : C(0);  // a fully masked row: out 0, lse -inf
    T* orow = out + (bh * P.L + i0 + r) * P.Ev;
    for (int64_t c = 0; c < P.Ev; ++c) orow[c] = cast<T>(o[r * P.Evp + c] * inv);
    lse[bh * P.L + i0 + r] = l[r] > 0 ? m[r] + std::log(l[r]) : kNegInf<C>;
  }
}

template <class T, class C>
Problem<T, C> problem_of(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                         const AttentionParams& p) {
  Problem<T, C> P{};
  P.q = static_cast<const T*>(q.data_ptr());
  P.k = static_cast<const T*>(k.data_ptr());
  P.v = static_cast<const T*>(v.data_ptr());
  P.BH = q.size(0), P.L = q.size(1), P.S = k.size(1), P.E = q.size(2), P.Ev = v.size(2);
  P.Ep = padded(P.E), P.Evp = padded(P.Ev);
  if (mask.defined()) {
    EMBER_CHECK(mask.dtype() == (std::is_same_v<C, double> ? kFloat64 : kFloat32), "attention kernel: the mask is ",
                dtype_name(mask.dtype()), ", not the compute dtype");
    P.mask = static_cast<const C*>(mask.data_ptr());
    P.mb = mask.stride(0), P.ml = mask.stride(1), P.ms = mask.stride(2);
  }
  P.scale = static_cast<C>(p.scale);
  P.causal = p.causal;
  P.p = static_cast<C>(p.dropout_p);
  P.keep_scale = static_cast<C>(1 / (1 - p.dropout_p));
  P.seed = p.philox.seed, P.offset = p.philox.offset;
  return P;
}

template <class F>
void visit_attention_dtype(DType d, const char* op, F&& f) {
  visit_dtype(d, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_float_v<T>) f(tag);
    else EMBER_FAIL(op, " kernel: expects a floating dtype, got ", dtype_name(d));
  });
}

void attention_kernel(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                      const Tensor& mask, const AttentionParams& params) {
  visit_attention_dtype(q.dtype(), "attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const Problem<T, C> P = problem_of<T, C>(q, k, v, mask, params);
    T* o = static_cast<T*>(out.data_ptr());
    C* ls = static_cast<C*>(lse.data_ptr());
    const int64_t blocks = (P.L + kBr - 1) / kBr;
    const int64_t tile = kBr * P.Ep + P.E * kBc + kBc * P.Evp + kBr * kBc + kBr * P.Evp + 2 * kBr;
    parallel_for(0, P.BH * blocks, 1, [&](int64_t b, int64_t e) {
      Scratch<C> buf(static_cast<size_t>(tile));
      for (int64_t t = b; t < e; ++t) forward_block(P, t / blocks, zigzag(t % blocks, blocks) * kBr, o, ls, buf.data());
    });
  });
}

// The backward's tiles of one (query block, key block) pair: the packed queries (times
// scale), dout, their lse and D; the key block's k^T, v^T and k; the weights, the
// gradients of the scores and dropout's factors of one row.
template <class C>
struct BackwardTiles {
  C *qs, *dout, *lse, *d, *kt, *vt, *kb, *p, *ds, *z;
  static int64_t size(int64_t Ep, int64_t Evp, int64_t E, int64_t Ev) {
    return kBr * Ep + kBr * Evp + 2 * kBr + E * kBc + Ev * kBc + kBc * Ep + 2 * kBr * kBc + kBc;
  }
  BackwardTiles(C* buf, int64_t Ep, int64_t Evp, int64_t E, int64_t Ev)
      : qs(buf), dout(qs + kBr * Ep), lse(dout + kBr * Evp), d(lse + kBr), kt(d + kBr), vt(kt + E * kBc),
        kb(vt + Ev * kBc), p(kb + kBc * Ep), ds(p + kBr * kBc), z(ds + kBr * kBc) {}
};

template <class T, class C>
void pack_queries(const Problem<T, C>& P, int64_t bh, int64_t i0, int64_t rows, const T* dout, const C* lse,
                  const C* dsum, BackwardTiles<C>& t) {
  const int64_t rows_pad = (rows + 3) / 4 * 4;
  pack_rows(P.q + (bh * P.L + i0) * P.E, P.E, rows, P.E, P.scale, t.qs, P.Ep, rows_pad);
  pack_rows(dout + (bh * P.L + i0) * P.Ev, P.Ev, rows, P.Ev, C(1), t.dout, P.Evp, rows_pad);
  std::copy(lse + bh * P.L + i0, lse + bh * P.L + i0 + rows, t.lse);
  std::copy(dsum + bh * P.L + i0, dsum + bh * P.L + i0 + rows, t.d);
}

template <class T, class C>
void pack_keys(const Problem<T, C>& P, int64_t bh, int64_t j0, bool rows_too, BackwardTiles<C>& t) {
  const int64_t nc = std::min(kBc, P.S - j0);
  pack_transposed(P.k + (bh * P.S + j0) * P.E, nc, P.E, t.kt);
  pack_transposed(P.v + (bh * P.S + j0) * P.Ev, nc, P.Ev, t.vt);
  if (rows_too) pack_rows(P.k + (bh * P.S + j0) * P.E, P.E, nc, P.E, C(1), t.kb, P.Ep, nc);
}

// For rows [i0, i0 + rows) and keys [j0, j0 + kBc): t.p = the weights as applied to v
// (after dropout) and t.ds = dS = P (dP - D), dP the gradient of the weights before
// dropout (dout v^T times dropout's factors).
template <class T, class C>
void backward_tile(const Problem<T, C>& P, int64_t bh, int64_t i0, int64_t rows, int64_t j0, BackwardTiles<C>& t) {
  const int64_t rows_pad = (rows + 3) / 4 * 4, nc = std::min(kBc, P.S - j0);
  product_tile(t.qs, P.Ep, rows_pad, t.kt, P.E, t.p);
  product_tile(t.dout, P.Evp, rows_pad, t.vt, P.Ev, t.ds);
  for (int64_t r = 0; r < rows; ++r) {
    C *pr = t.p + r * kBc, *dsr = t.ds + r * kBc;
    mask_row(P, bh, i0 + r, j0, pr);
    // A fully masked row (lse -inf) has no weights: exp(-inf - 0) = 0 throughout.
    exp_row(pr, t.lse[r] == kNegInf<C> ? C(0) : t.lse[r]);
    const C dr = t.d[r];
    if (P.p > 0) {
      std::fill(t.z, t.z + nc, C(1));
      dropout_row(P, bh, i0 + r, j0, nc, t.z);
      for (int64_t j = 0; j < nc; ++j) {
        dsr[j] = pr[j] * (dsr[j] * t.z[j] - dr);
        pr[j] *= t.z[j];
      }
      std::fill(dsr + nc, dsr + kBc, C(0));
    } else {
      for (int64_t j = 0; j < kBc; ++j) dsr[j] = pr[j] * (dsr[j] - dr);
    }
  }
}

// dk, dv of key block j0: sums over every query block that sees it.
template <class T, class C>
void key_block_grads(const Problem<T, C>& P, int64_t bh, int64_t j0, const T* dout, const C* lse, const C* dsum,
                     T* dk, T* dv, C* buf) {
  BackwardTiles<C> t(buf, P.Ep, P.Evp, P.E, P.Ev);
  C* dkb = buf + BackwardTiles<C>::size(P.Ep, P.Evp, P.E, P.Ev);
  C* dvb = dkb + kBc * P.Ep;
  const int64_t nc = std::min(kBc, P.S - j0);
  std::fill(dkb, dkb + kBc * P.Ep, C(0));
  std::fill(dvb, dvb + kBc * P.Evp, C(0));
  pack_keys(P, bh, j0, false, t);
  // Causal: query row i sees key j0 from i = j0 on.
  for (int64_t i0 = P.causal ? j0 / kBr * kBr : 0; i0 < P.L; i0 += kBr) {
    const int64_t rows = std::min(kBr, P.L - i0);
    pack_queries(P, bh, i0, rows, dout, lse, dsum, t);
    backward_tile(P, bh, i0, rows, j0, t);
    accumulate(dvb, P.Evp, nc, P.Evp, t.p, 1, kBc, rows, t.dout, P.Evp);
    accumulate(dkb, P.Ep, nc, P.Ep, t.ds, 1, kBc, rows, t.qs, P.Ep);  // qs = scale q: dk = scale dS^T q
  }
  for (int64_t j = 0; j < nc; ++j) {
    for (int64_t c = 0; c < P.E; ++c) dk[(bh * P.S + j0 + j) * P.E + c] = cast<T>(dkb[j * P.Ep + c]);
    for (int64_t c = 0; c < P.Ev; ++c) dv[(bh * P.S + j0 + j) * P.Ev + c] = cast<T>(dvb[j * P.Evp + c]);
  }
}

// dq of query block i0: sums over every key block it sees.
template <class T, class C>
void query_block_grads(const Problem<T, C>& P, int64_t bh, int64_t i0, const T* dout, const C* lse, const C* dsum,
                       T* dq, C* buf) {
  BackwardTiles<C> t(buf, P.Ep, P.Evp, P.E, P.Ev);
  C* dqb = buf + BackwardTiles<C>::size(P.Ep, P.Evp, P.E, P.Ev);
  const int64_t rows = std::min(kBr, P.L - i0);
  std::fill(dqb, dqb + rows * P.Ep, C(0));
  pack_queries(P, bh, i0, rows, dout, lse, dsum, t);
  const int64_t end = P.key_end(i0 + rows);
  for (int64_t j0 = 0; j0 < end; j0 += kBc) {
    pack_keys(P, bh, j0, true, t);
    backward_tile(P, bh, i0, rows, j0, t);
    accumulate(dqb, P.Ep, rows, P.Ep, t.ds, kBc, 1, std::min(kBc, P.S - j0), t.kb, P.Ep);
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < P.E; ++c) dq[(bh * P.L + i0 + r) * P.E + c] = cast<T>(dqb[r * P.Ep + c] * P.scale);
}

void attention_backward_kernel(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                               const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                               const Tensor& mask, const AttentionParams& params) {
  visit_attention_dtype(q.dtype(), "attention_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const Problem<T, C> P = problem_of<T, C>(q, k, v, mask, params);
    const T *go = static_cast<const T*>(dout.data_ptr()), *o = static_cast<const T*>(out.data_ptr());
    const C* ls = static_cast<const C*>(lse.data_ptr());
    T *gq = static_cast<T*>(dq.data_ptr()), *gk = static_cast<T*>(dk.data_ptr()), *gv = static_cast<T*>(dv.data_ptr());
    // D = rowsum(dout * out): with dropout too, as out = (P z) v.
    Scratch<C> dsum(static_cast<size_t>(std::max<int64_t>(1, P.BH * P.L)));
    C* ds = dsum.data();
    const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, P.Ev));
    parallel_for(0, P.BH * P.L, grain, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        C acc = 0;
        for (int64_t c = 0; c < P.Ev; ++c) acc += cast<C>(go[r * P.Ev + c]) * cast<C>(o[r * P.Ev + c]);
        ds[r] = acc;
      }
    });
    const int64_t tiles = BackwardTiles<C>::size(P.Ep, P.Evp, P.E, P.Ev);
    const int64_t kblocks = (P.S + kBc - 1) / kBc, qblocks = (P.L + kBr - 1) / kBr;
    parallel_for(0, P.BH * kblocks, 1, [&](int64_t b, int64_t e) {
      Scratch<C> buf(static_cast<size_t>(tiles + kBc * (P.Ep + P.Evp)));
      for (int64_t t = b; t < e; ++t)
        key_block_grads(P, t / kblocks, zigzag(t % kblocks, kblocks) * kBc, go, ls, ds, gk, gv, buf.data());
    });
    parallel_for(0, P.BH * qblocks, 1, [&](int64_t b, int64_t e) {
      Scratch<C> buf(static_cast<size_t>(tiles + kBr * P.Ep));
      for (int64_t t = b; t < e; ++t)
        query_block_grads(P, t / qblocks, zigzag(t % qblocks, qblocks) * kBr, go, ls, ds, gq, buf.data());
    });
  });
}

}  // namespace

void register_attention() {
  attention_stub.set(DeviceType::CPU, attention_kernel);
  attention_backward_stub.set(DeviceType::CPU, attention_backward_kernel);
}

}  // namespace ember::kernels::cpu
