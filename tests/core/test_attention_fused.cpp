// The fused attention path (Note [Attention path] in core/ops_attention.cpp; the kernels
// in kernels/cpu/attention.cpp and kernels/cuda/attention.cuh): forced with
// EMBER_ATTENTION=flash and checked against float64 loops (attention_reference.h) at
// sizes around the kernels' 64-row blocks (T = 1, 17, 129, 1000; Tq != Tk; head dims 8 to
// 256 with 40 and 80), causal and not, bool and additive masks, fully masked rows; the kernels
// writing every element of poisoned outputs; gradients against the float64 loop and the
// math path, gradcheck; dropout's keep statistics and its mask replayed by the backward;
// EMBER_ATTENTION's choices; and peak memory linear in T (quadratic on the math path).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "attention_reference.h"
#include "core/dispatch.h"
#include "ember.h"
#include "reference.h"
#include "tests/device.h"

namespace ember::test {
namespace {

struct Case {
  int64_t B, L, S, E, Ev;
  int mask_kind;  // 0 none, 1 bool, 2 additive, 3 causal
  Shape mask_shape;
  bool masked_row = false;  // a bool mask with a fully masked query row
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {2, 1, 1, 8, 8, 0, {}},
      {2, 17, 17, 40, 40, 3, {}},
      {1, 129, 129, 64, 64, 3, {}},
      {2, 17, 129, 80, 80, 1, {2, 17, 129}, true},
      {2, 129, 17, 40, 24, 2, {129, 17}},
      {1, 65, 70, 256, 256, 0, {}},
      {3, 33, 70, 16, 8, 3, {}},  // causal with L < S
      {2, 70, 33, 16, 8, 3, {}},  // causal with L > S
      {1, 5, 70, 10, 6, 3, {}},   // causal: no query row sees the last key tiles (their dk, dv stay 0)
  };
  return c;
}

Tensor make_mask(const Case& c, DType dtype, uint64_t seed) {
  if (c.mask_kind == 1) {
    Tensor m = bool_mask(c.mask_shape, seed);
    if (c.masked_row) m.select(0, c.mask_shape[0] - 1).select(0, c.L / 2).fill_(false);
    return m;
  }
  if (c.mask_kind == 2) return random_tensor(c.mask_shape, dtype, Layout::Contiguous, seed);
  return {};
}

double scale_of(const Case& c) { return 1 / std::sqrt(static_cast<double>(c.E)); }

TEST(FusedAttention, MatchesTheFloat64Reference) {
  const AttentionPath flash("flash");
  uint64_t seed = 1000;
  for (DType dtype : {kFloat64, kFloat32, kBFloat16, kFloat16}) {
    for (size_t ci = 0; ci < cases().size(); ++ci) {
      const Case& c = cases()[ci];
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " case " + std::to_string(ci));
      const Tensor q = random_tensor({c.B, c.L, c.E}, dtype, Layout::Contiguous, ++seed);
      const Tensor k = random_tensor({c.B, c.S, c.E}, dtype, Layout::Contiguous, ++seed);
      const Tensor v = random_tensor({c.B, c.S, c.Ev}, dtype, Layout::Contiguous, ++seed);
      const Tensor mask = make_mask(c, dtype, ++seed);
      if (on_cuda() && dtype == kFloat64 && c.E > 128) {  // the CUDA kernel's float64 tiles would not fit
        EXPECT_EMBER_ERROR(scaled_dot_product_attention(q, k, v), "EMBER_ATTENTION=flash",
                           "float64 head dims up to 128");
        continue;
      }
      // 16-bit inputs are computed in float32 and rounded once: float32's bound plus half
      // an ulp of the dtype (its own bound, for a computation in 16 bits, passes 1 at S = 129);
      // the CUDA tensor-core kernel also rounds the weights to the dtype before P V, u
      // sum_j p_j |v_j| more (kernels/cuda/attention_tc.cuh).
      const bool narrow = dtype == kBFloat16 || dtype == kFloat16;
      Reference want = reference(q, k, v, c.mask_kind, mask, scale_of(c), narrow ? kFloat32 : dtype);
      if (narrow)
        for (size_t i = 0; i < want.out.size(); ++i)
          want.tol[i] += dtype_unit_roundoff(dtype) * (std::fabs(want.out[i]) + want.magnitude[i]) +
                         dtype_underflow(dtype);
      const Tensor got = scaled_dot_product_attention(q, k, v, {.attn_mask = mask, .is_causal = c.mask_kind == 3});
      EXPECT_DTYPE(got, dtype);
      EXPECT_TRUE(all_close_tol(got, want.out, want.shape, want.tol));
    }
  }
}

// Batch dims broadcast (k and v shared by the heads) and a mask whose broadcast cannot
// fold into one stride ([B, 1, L, S] over B x H): the fused path copies only there.
TEST(FusedAttention, BroadcastBatchDimsAndMasks) {
  const AttentionPath flash("flash");
  const Tensor q = random_tensor({2, 3, 17, 8}, kFloat64, Layout::Transposed, 1);
  const Tensor k = random_tensor({2, 1, 20, 8}, kFloat64, Layout::Contiguous, 2);
  const Tensor v = random_tensor({1, 20, 5}, kFloat64, Layout::Strided, 3);
  for (const Tensor& mask : {bool_mask({2, 1, 17, 20}, 4), bool_mask({17, 20}, 5),
                             random_tensor({3, 1, 20}, kFloat64, Layout::Contiguous, 6)}) {
    const int kind = mask.dtype() == kBool ? 1 : 2;
    const Reference want = reference(q, k, v, kind, mask, 1 / std::sqrt(8.0), kFloat64);
    EXPECT_TRUE(all_close_tol(scaled_dot_product_attention(q, k, v, {.attn_mask = mask}), want.out, want.shape,
                              want.tol));
  }
}

// The stubs called directly on NaN-filled outputs: every element of out, lse, dq, dk and
// dv is written (lse: -inf for the fully masked row, whose gradients are 0).
TEST(FusedAttention, KernelsWriteEveryOutput) {
  const int64_t B = 2, L = 70, S = 129, E = 40, Ev = 24;
  const double scale = 0.3, nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor q = random_tensor({B, L, E}, kFloat32, Layout::Contiguous, 11);
  const Tensor k = random_tensor({B, S, E}, kFloat32, Layout::Contiguous, 12);
  const Tensor v = random_tensor({B, S, Ev}, kFloat32, Layout::Contiguous, 13);
  const Tensor dout = random_tensor({B, L, Ev}, kFloat32, Layout::Contiguous, 14);
  Tensor keep = bool_mask({B, L, S}, 15);
  keep.select(0, 1).select(0, 3).fill_(false);
  const Tensor mask = where(keep, scalar_tensor(0.0, kFloat32), scalar_tensor(-kInf, kFloat32));
  const kernels::AttentionParams params{scale, false, 0.0, {0, 0}};
  Tensor out = full({B, L, Ev}, nan, kFloat32), lse = full({B, L}, nan, kFloat32);
  kernels::attention_stub(q.device(), out, lse, q, k, v, mask, params);
  const Reference want = reference(q, k, v, 1, keep, scale, kFloat32);
  EXPECT_TRUE(all_close_tol(out, want.out, want.shape, want.tol));
  // lse against log sum exp of the float64 scores: float32 rounding of E-term dot products.
  const std::vector<double> qv = values(q), kv = values(k), kp = values(keep), got_lse = values(lse);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < L; ++i) {
      double mx = -kInf, a = 0;
      std::vector<double> s(static_cast<size_t>(S), -kInf);
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0, adot = 0;
        for (int64_t e = 0; e < E; ++e) {
          dot += qv[(b * L + i) * E + e] * kv[(b * S + j) * E + e];
          adot += std::fabs(qv[(b * L + i) * E + e] * kv[(b * S + j) * E + e]);
        }
        a = std::max(a, adot * scale);
        if (kp[(b * L + i) * S + j] != 0) s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      const double got = got_lse[b * L + i];
      if (mx == -kInf) {
        EXPECT_EQ(got, -kInf) << "row " << b << ", " << i;
        continue;
      }
      double total = 0;
      for (double x : s) total += std::exp(x - mx);
      const double u = dtype_unit_roundoff(kFloat32);
      EXPECT_NEAR(got, mx + std::log(total), gamma_n(static_cast<double>(E + 2), u) * a + gamma_n(2.0 * S + 8, u))
          << "row " << b << ", " << i;
    }
  Tensor dq = full({B, L, E}, nan, kFloat32), dk = full({B, S, E}, nan, kFloat32), dv = full({B, S, Ev}, nan, kFloat32);
  kernels::attention_backward_stub(q.device(), dq, dk, dv, dout, q, k, v, out, lse, mask, params);
  const GradReference g = reference_grads(q, k, v, dout, 1, keep, scale, kFloat32);
  EXPECT_TRUE(all_close_tol(dq, g.dq.out, g.dq.shape, g.dq.tol));
  EXPECT_TRUE(all_close_tol(dk, g.dk.out, g.dk.shape, g.dk.tol));
  EXPECT_TRUE(all_close_tol(dv, g.dv.out, g.dv.shape, g.dv.tol));
}

// Gradients through autograd on the fused path against the float64 loop, and (float64)
// against the math path: both within the bound of the exact value, so within twice it.
TEST(FusedAttention, GradientsMatchTheReferenceAndTheMathPath) {
  uint64_t seed = 2000;
  for (DType dtype : {kFloat64, kFloat32}) {
    for (size_t ci : {size_t(1), size_t(2), size_t(3), size_t(4), size_t(6), size_t(7), size_t(8)}) {
      const Case& c = cases()[ci];
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " case " + std::to_string(ci));
      std::vector<Tensor> x = {random_tensor({c.B, c.L, c.E}, dtype, Layout::Contiguous, ++seed),
                               random_tensor({c.B, c.S, c.E}, dtype, Layout::Contiguous, ++seed),
                               random_tensor({c.B, c.S, c.Ev}, dtype, Layout::Contiguous, ++seed)};
      const Tensor dout = random_tensor({c.B, c.L, c.Ev}, dtype, Layout::Contiguous, ++seed);
      const Tensor mask = make_mask(c, dtype, ++seed);
      const AttentionOptions o{.attn_mask = mask, .is_causal = c.mask_kind == 3};
      const GradReference want = reference_grads(x[0], x[1], x[2], dout, c.mask_kind, mask, scale_of(c), dtype);
      std::vector<std::vector<Tensor>> grads;
      for (const char* path : {"flash", "math"}) {
        const AttentionPath forced(path);
        for (Tensor& t : x) {
          t = t.detach();
          t.requires_grad_();
        }
        const Tensor out = scaled_dot_product_attention(x[0], x[1], x[2], o);
        EXPECT_EQ(out.grad_fn_name() == "scaled_dot_product_attention", std::string(path) == "flash");
        out.backward(dout);
        grads.push_back({x[0].grad(), x[1].grad(), x[2].grad()});
      }
      const Reference* refs[3] = {&want.dq, &want.dk, &want.dv};
      for (int i = 0; i < 3; ++i) {
        EXPECT_TRUE(all_close_tol(grads[0][i], refs[i]->out, refs[i]->shape, refs[i]->tol)) << "input " << i;
        if (dtype != kFloat64) continue;
        std::vector<double> twice = refs[i]->tol;
        for (double& t : twice) t *= 2;
        EXPECT_TRUE(all_close_tol(grads[0][i], values(grads[1][i]), refs[i]->shape, twice)) << "input " << i;
      }
    }
  }
}

// The long and awkward sizes: T = 1000 with Tq != Tk both ways, head dims 8, 40,
// 80 and 256 (the CUDA kernel's largest), each mask kind, a fully masked row; forward in
// float32 and bf16, gradients in float32. One batch x head; D = 256 at T = 1000 forward
// in float32 only, and gradients at T = 1000 for D = 8 (D = 256's at T = 129 x 70, D = 40's
// and 80's at T = 17 x 129 in GradientsMatchTheReferenceAndTheMathPath). On the emulated
// device (kernels instrumented for its checks) the T = 1000 cases run in float32 only and
// D = 256 at T = 129 x 70 only: 85 s with them under load, 24 s so.
TEST(FusedAttention, LongAndAwkwardSizes) {
  const AttentionPath flash("flash");
  const std::vector<Case> long_cases = {
      {1, 1000, 1003, 8, 8, 3, {}},
      {1, 1003, 1000, 40, 40, 1, {1, 1003, 1000}, true},
      {1, 1000, 999, 80, 80, 2, {1000, 999}},
      {1, 999, 1000, 256, 256, 0, {}},
      {1, 129, 70, 256, 256, 1, {1, 129, 70}, true},
  };
  uint64_t seed = 5000;
  for (size_t ci = 0; ci < long_cases.size(); ++ci) {
    const Case& c = long_cases[ci];
    for (DType dtype : {kFloat32, kBFloat16}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " case " + std::to_string(ci));
      const bool long_256 = c.E == 256 && c.L > 129;
      if (long_256 && (dtype != kFloat32 || on_cuda())) continue;
      if (on_cuda() && dtype != kFloat32 && c.L > 129) continue;
      const Tensor q = random_tensor({c.B, c.L, c.E}, dtype, Layout::Contiguous, ++seed);
      const Tensor k = random_tensor({c.B, c.S, c.E}, dtype, Layout::Contiguous, ++seed);
      const Tensor v = random_tensor({c.B, c.S, c.Ev}, dtype, Layout::Contiguous, ++seed);
      const Tensor mask = make_mask(c, dtype, ++seed);
      const AttentionOptions o{.attn_mask = mask, .is_causal = c.mask_kind == 3};
      // The bound of MatchesTheFloat64Reference (16-bit: float32's plus the dtype's roundings).
      const bool narrow = dtype == kBFloat16;
      Reference want = reference(q, k, v, c.mask_kind, mask, scale_of(c), kFloat32);
      if (narrow)
        for (size_t i = 0; i < want.out.size(); ++i)
          want.tol[i] += dtype_unit_roundoff(dtype) * (std::fabs(want.out[i]) + want.magnitude[i]) +
                         dtype_underflow(dtype);
      EXPECT_TRUE(all_close_tol(scaled_dot_product_attention(q, k, v, o), want.out, want.shape, want.tol));
      if (narrow || (c.L > 129 && c.E > 8)) continue;
      std::vector<Tensor> x = {q.detach(), k.detach(), v.detach()};
      for (Tensor& t : x) t.requires_grad_();
      const Tensor dout = random_tensor({c.B, c.L, c.Ev}, dtype, Layout::Contiguous, ++seed);
      scaled_dot_product_attention(x[0], x[1], x[2], o).backward(dout);
      const GradReference g = reference_grads(q, k, v, dout, c.mask_kind, mask, scale_of(c), dtype);
      const Reference* refs[3] = {&g.dq, &g.dk, &g.dv};
      for (int i = 0; i < 3; ++i)
        EXPECT_TRUE(all_close_tol(x[i].grad(), refs[i]->out, refs[i]->shape, refs[i]->tol)) << "input " << i;
    }
  }
}

TEST(FusedAttention, Gradcheck) {
  const AttentionPath flash("flash");
  auto leaf = [](const Shape& s, uint64_t seed) {
    Tensor t = random_tensor(s, kFloat64, Layout::Contiguous, seed);
    t.requires_grad_();
    return t;
  };
  const Tensor q = leaf({2, 5, 3}, 40), k = leaf({2, 7, 3}, 41), v = leaf({2, 7, 4}, 42);
  Tensor keep = bool_mask({2, 5, 7}, 43);
  keep.select(0, 0).select(0, 2).fill_(false);  // a fully masked row: zero output and gradients
  const Tensor additive = random_tensor({5, 7}, kFloat64, Layout::Contiguous, 44);
  const std::vector<AttentionOptions> options = {{}, {.attn_mask = keep}, {.attn_mask = additive, .scale = 0.7},
                                                 {.is_causal = true}, {.is_causal = true, .dropout_p = 0.3}};
  for (size_t i = 0; i < options.size(); ++i) {
    SCOPED_TRACE("options " + std::to_string(i));
    // A fresh generator per call: dropout draws the same mask each time.
    const auto f = [o = options[i]](const std::vector<Tensor>& x) mutable {
      Generator gen(9);
      o.generator = &gen;
      return scaled_dot_product_attention(x[0], x[1], x[2], o);
    };
    EXPECT_TRUE(grad_ok(f, {q, k, v}));
  }
}

// With v the identity, out is the weights as applied: each is 0 or the weight of the
// math path over (1 - p), about p of them are dropped, and exactly the ones the math
// path's dropout drops at the same generator state (float32 and float64 draw alike).
TEST(FusedAttention, DropoutKeepStatisticsAndTheMathPathsMask) {
  const double p = 0.3;
  for (DType dtype : {kFloat64, kFloat32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const int64_t B = 2, L = 48, S = 96;
    const Tensor q = random_tensor({B, L, 16}, dtype, Layout::Contiguous, 50);
    const Tensor k = random_tensor({B, S, 16}, dtype, Layout::Contiguous, 51);
    const Tensor v = eye(S, S, {dtype}).expand({B, S, S});
    Generator g1(77), g2(77);
    Tensor fused;
    {
      const AttentionPath flash("flash");
      fused = scaled_dot_product_attention(q, k, v, {.dropout_p = p, .generator = &g1});
    }
    const auto [math_out, math_w] = scaled_dot_product_attention_math(q, k, v, {.dropout_p = p, .generator = &g2});
    EXPECT_EQ(g1.offset(), g2.offset()) << "both paths take the same Philox blocks";
    const std::vector<double> plain = values(scaled_dot_product_attention_math(q, k, v).second);
    const std::vector<double> got = values(fused), mw = values(math_w);
    const double tol = dtype == kFloat64 ? 1e-13 : 1e-5;  // the rounding of a softmax over S = 96 terms
    int64_t dropped = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i] == 0, mw[i] == 0) << "weight " << i << ": the paths drop different weights";
      if (got[i] == 0) ++dropped;
      else EXPECT_NEAR(got[i], plain[i] / (1 - p), tol * plain[i] / (1 - p)) << "weight " << i;
    }
    const double n = static_cast<double>(got.size()), frac = static_cast<double>(dropped) / n;
    EXPECT_NEAR(frac, p, 5 * std::sqrt(p * (1 - p) / n)) << "5 standard deviations of a binomial";
  }
}

// The fused backward regenerates the forward's mask: its gradients equal those of the
// math formula with the same mask (the math path at the same generator state).
TEST(FusedAttention, DropoutBackwardReplaysTheMask) {
  const int64_t B = 2, L = 70, S = 40, E = 16, Ev = 8;
  std::vector<Tensor> x = {random_tensor({B, L, E}, kFloat64, Layout::Contiguous, 60),
                           random_tensor({B, S, E}, kFloat64, Layout::Contiguous, 61),
                           random_tensor({B, S, Ev}, kFloat64, Layout::Contiguous, 62)};
  const Tensor dout = random_tensor({B, L, Ev}, kFloat64, Layout::Contiguous, 63);
  std::vector<std::vector<Tensor>> grads;
  for (const char* path : {"flash", "math"}) {
    const AttentionPath forced(path);
    for (Tensor& t : x) {
      t = t.detach();
      t.requires_grad_();
    }
    Generator gen(123);
    scaled_dot_product_attention(x[0], x[1], x[2], {.is_causal = true, .dropout_p = 0.4, .generator = &gen})
        .backward(dout);
    grads.push_back({x[0].grad(), x[1].grad(), x[2].grad()});
  }
  // float64: under 2 (E + Ev + S + L) + 16 = 284 roundings of 2^-53 on sums of magnitude
  // below 100 (values of N(0, 1) data, weights at most 1 / (1 - p)).
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(all_close(grads[0][i], grads[1][i], 1e-11, 1e-11)) << "input " << i;
}

// The CPU kernels split the work by blocks and add no two threads' results into one row:
// the same bits at any thread count.
TEST(FusedAttention, SameBitsAtAnyThreadCount) {
  EMBER_CPU_ONLY();
  const AttentionPath flash("flash");
  const int saved = get_num_threads();
  std::vector<Tensor> x = {random_tensor({3, 150, 40}, kFloat32, Layout::Contiguous, 80),
                           random_tensor({3, 200, 40}, kFloat32, Layout::Contiguous, 81),
                           random_tensor({3, 200, 24}, kFloat32, Layout::Contiguous, 82)};
  const Tensor dout = random_tensor({3, 150, 24}, kFloat32, Layout::Contiguous, 83);
  std::vector<std::vector<Tensor>> runs;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    for (Tensor& t : x) {
      t = t.detach();
      t.requires_grad_();
    }
    Generator gen(4);
    const Tensor out = scaled_dot_product_attention(x[0], x[1], x[2], {.is_causal = true, .dropout_p = 0.2,
                                                                        .generator = &gen});
    out.backward(dout);
    runs.push_back({out, x[0].grad(), x[1].grad(), x[2].grad()});
  }
  set_num_threads(saved);
  for (size_t r = 1; r < runs.size(); ++r)
    for (size_t i = 0; i < runs[0].size(); ++i)
      EXPECT_EQ(values(runs[r][i]), values(runs[0][i])) << "run " << r << ", tensor " << i;
}

TEST(FusedAttention, EnvironmentChoosesThePath) {
  const Tensor q = random_tensor({2, 5, 4}, kFloat64).detach(), k = random_tensor({2, 6, 4}, kFloat64, {}, 2).detach();
  const Tensor v = random_tensor({2, 6, 3}, kFloat64, {}, 3).detach();
  for (const Tensor* t : {&q, &k, &v}) t->requires_grad_();
  Tensor bias = random_tensor({5, 6}, kFloat64, {}, 4).detach();
  const char* op = "scaled_dot_product_attention";
  {
    const AttentionPath math("math");
    EXPECT_NE(scaled_dot_product_attention(q, k, v).grad_fn_name(), op);
  }
  for (const char* path : {"flash", "auto"}) {
    const AttentionPath forced(path);
    EXPECT_EQ(scaled_dot_product_attention(q, k, v).grad_fn_name(), op) << path;
  }
  {
    const AttentionPath automatic("auto");
    bias.requires_grad_();  // its gradient needs the L x S scores: the math path
    EXPECT_NE(scaled_dot_product_attention(q, k, v, {.attn_mask = bias}).grad_fn_name(), op);
    EXPECT_NE(scaled_dot_product_attention(q, k, v, {.dropout_p = 1}).grad_fn_name(), op);
  }
  {
    const AttentionPath flash("flash");
    EXPECT_EMBER_ERROR(scaled_dot_product_attention(q, k, v, {.attn_mask = bias}), op, "EMBER_ATTENTION=flash",
                       "mask requires grad");
    EXPECT_EMBER_ERROR(scaled_dot_product_attention(q, k, v, {.dropout_p = 1}), op, "dropout_p is 1");
  }
  // cudnn picks as auto (the CUDA backend's choice between cuDNN and its kernels); another
  // value is an error naming the variable and its choices.
  {
    const AttentionPath forced("cudnn");
    EXPECT_EQ(scaled_dot_product_attention(q, k, v).grad_fn_name(), op);
  }
  {
    const AttentionPath forced("fast");
    EXPECT_EMBER_ERROR(scaled_dot_product_attention(q, k, v), "EMBER_ATTENTION=fast", "auto, math, flash or cudnn");
  }
}

// Peak memory of a forward + backward step over the inputs' own: the fused path keeps
// O(T) (out, lse, the gradients, constant tiles per thread), the math path O(T^2) (the
// scores and weights). With peak = a T^2 + b T + c, doubling T at most doubles a linear
// peak (c >= 0; 10% for the allocator's rounding of block sizes), and at least triples a
// quadratic one once a T >= b: D = 16 keeps b (about 6 D floats per row) under T = 128's
// a T (a >= 1 float per score).
TEST(FusedAttention, PeakMemoryGrowsLinearly) {
  const std::vector<int64_t> sizes = on_cuda() ? std::vector<int64_t>{128, 256, 512}
                                                : std::vector<int64_t>{256, 512, 1024, 2048};
  const Device d = test_device();
  auto step_peak = [&](const char* path, int64_t T) {
    const AttentionPath forced(path);
    Tensor q = random_tensor({1, 2, T, 16}, kFloat32, Layout::Contiguous, 70).detach();
    Tensor k = random_tensor({1, 2, T, 16}, kFloat32, Layout::Contiguous, 71).detach();
    Tensor v = random_tensor({1, 2, T, 16}, kFloat32, Layout::Contiguous, 72).detach();
    for (Tensor* t : {&q, &k, &v}) t->requires_grad_();
    synchronize(d);
    reset_peak_memory_stats(d);
    const int64_t before = memory_stats(d).at("allocated_bytes.all.current");
    sum(scaled_dot_product_attention(q, k, v, {.is_causal = true})).backward();
    synchronize(d);
    return memory_stats(d).at("allocated_bytes.all.peak") - before;
  };
  std::vector<int64_t> fused, math;
  for (int64_t T : sizes) {
    fused.push_back(step_peak("flash", T));
    math.push_back(step_peak("math", T));
    std::printf("T = %lld: peak bytes fused %lld, math %lld\n", static_cast<long long>(T),
                static_cast<long long>(fused.back()), static_cast<long long>(math.back()));
  }
  for (size_t i = 1; i < sizes.size(); ++i) {
    EXPECT_LE(static_cast<double>(fused[i]), 2.2 * static_cast<double>(fused[i - 1])) << "T = " << sizes[i];
    EXPECT_GE(static_cast<double>(math[i]), 3.0 * static_cast<double>(math[i - 1])) << "T = " << sizes[i];
  }
}

}  // namespace
}  // namespace ember::test
