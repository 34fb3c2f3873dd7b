// The fused attention forward at the shapes the CUDA tensor-core kernel takes
// (kernels/cuda/attention_tc.cuh: bf16 and f16, head dims 64 and 128), against the float64
// loop of attention_reference.h: T = 1, 17, 129, 1000, Tq != Tk both ways, causal, bool and
// additive masks, a fully masked row; its lse; and on a CUDA device its agreement with the
// SIMT kernel (kernels/cuda/variants.h's set_attention_variant), dropout included (the
// same Philox draw, so the same weights dropped). On the CPU the same cases check the CPU
// kernel. In the emulator the tensor-core kernel runs on the emulated mma.sync, ldmatrix
// and cp.async (kernels/emu/tensor_core.h).
//
// Tolerance: the kernels compute in float32 (attention_reference.h's bound for float32),
// round the output once to the dtype (half an ulp), and the tensor-core kernel rounds the
// weights to the dtype before P V as FlashAttention does: u_dtype sum_j p_j |v_j| more.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "attention_reference.h"
#include "core/dispatch.h"
#include "ember.h"
#include "kernels/cuda/variants.h"
#include "reference.h"
#include "tests/device.h"

namespace ember::test {
namespace {

struct TcCase {
  int64_t B, L, S;
  int mask_kind;  // 0 none, 1 bool (a row of batch 1 fully masked), 2 additive [L, S], 3 causal
};

const std::vector<TcCase> kTcCases = {
    {2, 1, 1, 0}, {1, 17, 17, 3}, {2, 129, 129, 3}, {1, 17, 129, 0},
    {1, 129, 17, 2}, {2, 70, 33, 3}, {2, 33, 70, 1}, {1, 129, 65, 0},
};

Tensor tc_mask(const TcCase& c, DType dtype, uint64_t seed) {
  if (c.mask_kind == 1) {
    Tensor m = bool_mask({c.B, c.L, c.S}, seed);
    m.select(0, c.B - 1).select(0, c.L / 2).fill_(false);
    return m;
  }
  if (c.mask_kind == 2) return random_tensor({c.L, c.S}, dtype, Layout::Contiguous, seed);
  return {};
}

// The reference of c at dtype, with the tolerance of the header comment.
Reference tc_reference(const Tensor& q, const Tensor& k, const Tensor& v, const TcCase& c, const Tensor& mask,
                       double scale, DType dtype) {
  Reference want = reference(q, k, v, c.mask_kind, mask, scale, kFloat32);
  const double u = dtype_unit_roundoff(dtype);
  for (size_t i = 0; i < want.out.size(); ++i)
    want.tol[i] += u * (std::fabs(want.out[i]) + want.magnitude[i]) + dtype_underflow(dtype);
  return want;
}

TEST(TensorCoreAttention, MatchesTheFloat64Reference) {
  ::setenv("EMBER_ATTENTION", "flash", 1);
  uint64_t seed = 3000;
  for (DType dtype : {kBFloat16, kFloat16})
    for (int64_t D : {64, 128})
      for (size_t ci = 0; ci < kTcCases.size(); ++ci) {
        const TcCase& c = kTcCases[ci];
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " D " + std::to_string(D) + " case " + std::to_string(ci));
        const Tensor q = random_tensor({c.B, c.L, D}, dtype, Layout::Contiguous, ++seed);
        const Tensor k = random_tensor({c.B, c.S, D}, dtype, Layout::Contiguous, ++seed);
        const Tensor v = random_tensor({c.B, c.S, D}, dtype, Layout::Contiguous, ++seed);
        const Tensor mask = tc_mask(c, dtype, ++seed);
        const double scale = 1 / std::sqrt(double(D));
        const Reference want = tc_reference(q, k, v, c, mask, scale, dtype);
        const Tensor got = scaled_dot_product_attention(q, k, v, {.attn_mask = mask, .is_causal = c.mask_kind == 3});
        EXPECT_TRUE(all_close_tol(got, want.out, want.shape, want.tol));
      }
  ::unsetenv("EMBER_ATTENTION");
}

// lse of the stub against log sum exp of the float64 scores (float32 dot products of D
// terms, then exp and log), for the causal case with Tq != Tk and a fully masked row.
TEST(TensorCoreAttention, LogSumExpOfEachRow) {
  const int64_t B = 2, L = 70, S = 33, D = 64;
  const double scale = 0.125, nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor q = random_tensor({B, L, D}, kBFloat16, Layout::Contiguous, 21);
  const Tensor k = random_tensor({B, S, D}, kBFloat16, Layout::Contiguous, 22);
  const Tensor v = random_tensor({B, S, D}, kBFloat16, Layout::Contiguous, 23);
  Tensor keep = bool_mask({B, L, S}, 24);
  keep.select(0, 1).select(0, 5).fill_(false);
  const Tensor mask = where(keep, scalar_tensor(0.0, kFloat32), scalar_tensor(-kInf, kFloat32));
  Tensor out = full({B, L, D}, nan, kBFloat16), lse = full({B, L}, nan, kFloat32);
  const kernels::AttentionParams params{scale, true, 0.0, {0, 0}};
  kernels::attention_stub(q.device(), out, lse, q, k, v, mask, params);
  const std::vector<double> qv = values(q), kv = values(k), kp = values(keep), got = values(lse);
  const double u = dtype_unit_roundoff(kFloat32);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < L; ++i) {
      double mx = -kInf, a = 0;
      std::vector<double> s(static_cast<size_t>(S), -kInf);
      for (int64_t j = 0; j < S && j <= i; ++j) {
        double dot = 0, adot = 0;
        for (int64_t e = 0; e < D; ++e) {
          dot += qv[(b * L + i) * D + e] * kv[(b * S + j) * D + e];
          adot += std::fabs(qv[(b * L + i) * D + e] * kv[(b * S + j) * D + e]);
        }
        a = std::max(a, adot * scale);
        if (kp[(b * L + i) * S + j] != 0) s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      if (mx == -kInf) {
        EXPECT_EQ(got[b * L + i], -kInf) << "row " << b << ", " << i;
        continue;
      }
      double total = 0;
      for (double x : s) total += std::exp(x - mx);
      EXPECT_NEAR(got[b * L + i], mx + std::log(total),
                  gamma_n(double(D + 2), u) * a + gamma_n(2.0 * S + 8, u) + 4 * u * std::fabs(mx))
          << "row " << b << ", " << i;
    }
}

// Gradients through autograd against the float64 loop. Computed in float32 with the
// operands of each product rounded to the dtype (P Z and dS, as FlashAttention does; q, k,
// v, dout are the dtype already) and each gradient rounded once: the float32 bound plus
// u_dtype (2 magnitude + |grad|).
TEST(TensorCoreAttention, GradientsMatchTheFloat64Reference) {
  ::setenv("EMBER_ATTENTION", "flash", 1);
  uint64_t seed = 4000;
  for (DType dtype : {kBFloat16, kFloat16})
    for (int64_t D : {64, 128})
      for (size_t ci : {size_t(0), size_t(2), size_t(3), size_t(4), size_t(5), size_t(6)}) {
        const TcCase& c = kTcCases[ci];
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " D " + std::to_string(D) + " case " + std::to_string(ci));
        std::vector<Tensor> x = {random_tensor({c.B, c.L, D}, dtype, Layout::Contiguous, ++seed),
                                 random_tensor({c.B, c.S, D}, dtype, Layout::Contiguous, ++seed),
                                 random_tensor({c.B, c.S, D}, dtype, Layout::Contiguous, ++seed)};
        const Tensor dout = random_tensor({c.B, c.L, D}, dtype, Layout::Contiguous, ++seed);
        const Tensor mask = tc_mask(c, dtype, ++seed);
        for (Tensor& t : x) t.requires_grad_();
        const double scale = 1 / std::sqrt(double(D));
        scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = mask, .is_causal = c.mask_kind == 3})
            .backward(dout);
        const GradReference want = reference_grads(x[0], x[1], x[2], dout, c.mask_kind, mask, scale, kFloat32);
        const double u = dtype_unit_roundoff(dtype);
        const Reference* refs[3] = {&want.dq, &want.dk, &want.dv};
        for (int i = 0; i < 3; ++i) {
          std::vector<double> tol = refs[i]->tol;
          for (size_t e = 0; e < tol.size(); ++e)
            tol[e] += u * (2 * refs[i]->magnitude[e] + std::fabs(refs[i]->out[e])) + dtype_underflow(dtype);
          EXPECT_TRUE(all_close_tol(x[i].grad(), refs[i]->out, refs[i]->shape, tol)) << "input " << i;
        }
      }
  ::unsetenv("EMBER_ATTENTION");
}

// T = 1000 with Tq != Tk both ways (the kernel's 64-row blocks and 64-key tiles end
// part-way), causal and a bool mask with a fully masked row, one dtype and head dim each,
// with the bounds of the two tests above: forward both, gradients the first (each half a
// minute on the emulated device).
TEST(TensorCoreAttention, LongSequences) {
  const AttentionPath flash("flash");
  struct Long {
    TcCase c;
    DType dtype;
    int64_t D;
  };
  uint64_t seed = 4500;
  for (const Long& t : {Long{{1, 1000, 997, 3}, kBFloat16, 64}, Long{{1, 997, 1000, 1}, kFloat16, 128}}) {
    const TcCase& c = t.c;
    SCOPED_TRACE(std::string(dtype_name(t.dtype)) + " D " + std::to_string(t.D));
    std::vector<Tensor> x = {random_tensor({c.B, c.L, t.D}, t.dtype, Layout::Contiguous, ++seed),
                             random_tensor({c.B, c.S, t.D}, t.dtype, Layout::Contiguous, ++seed),
                             random_tensor({c.B, c.S, t.D}, t.dtype, Layout::Contiguous, ++seed)};
    const Tensor dout = random_tensor({c.B, c.L, t.D}, t.dtype, Layout::Contiguous, ++seed);
    const Tensor mask = tc_mask(c, t.dtype, ++seed);
    for (Tensor& y : x) y.requires_grad_();
    const double scale = 1 / std::sqrt(double(t.D));
    const Tensor out =
        scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = mask, .is_causal = c.mask_kind == 3});
    const Reference want = tc_reference(x[0], x[1], x[2], c, mask, scale, t.dtype);
    EXPECT_TRUE(all_close_tol(out, want.out, want.shape, want.tol));
    if (t.D != 64) continue;
    out.backward(dout);
    const GradReference g = reference_grads(x[0], x[1], x[2], dout, c.mask_kind, mask, scale, kFloat32);
    const double u = dtype_unit_roundoff(t.dtype);
    const Reference* refs[3] = {&g.dq, &g.dk, &g.dv};
    for (int i = 0; i < 3; ++i) {
      std::vector<double> tol = refs[i]->tol;
      for (size_t e = 0; e < tol.size(); ++e)
        tol[e] += u * (2 * refs[i]->magnitude[e] + std::fabs(refs[i]->out[e])) + dtype_underflow(t.dtype);
      EXPECT_TRUE(all_close_tol(x[i].grad(), refs[i]->out, refs[i]->shape, tol)) << "input " << i;
    }
  }
}

// On a CUDA device: the tensor-core kernel ("auto") and the SIMT kernel on one call, with
// dropout: both within their bound of the float64 result of the same kept weights, so
// within the sum of the bounds of each other; a different draw would differ by O(1).
TEST(TensorCoreAttention, AgreesWithTheSimtKernelUnderDropout) {
  if (!on_cuda()) GTEST_SKIP() << "compares the CUDA backend's two kernels (EMBER_TEST_DEVICE=cuda)";
  for (int64_t D : {64, 128}) {
    const int64_t B = 2, L = 65, S = 129;
    const Tensor q = random_tensor({B, L, D}, kBFloat16, Layout::Contiguous, 31 + D);
    const Tensor k = random_tensor({B, S, D}, kBFloat16, Layout::Contiguous, 32 + D);
    const Tensor v = random_tensor({B, S, D}, kBFloat16, Layout::Contiguous, 33 + D);
    const kernels::AttentionParams params{1 / std::sqrt(double(D)), false, 0.3, {1234, 8}};
    std::vector<Tensor> outs;
    for (const char* variant : {"auto", "simt"}) {
      kernels::cuda::set_attention_variant(variant);
      Tensor out = empty({B, L, D}, {kBFloat16, q.device()}), lse = empty({B, L}, {kFloat32, q.device()});
      kernels::attention_stub(q.device(), out, lse, q, k, v, Tensor(), params);
      outs.push_back(out);
    }
    kernels::cuda::set_attention_variant("auto");
    // Both are float32 computations of the same sum of kept weights times v: each within
    // the no-dropout bound (tc_reference's) with sum_j p_j |v_j| grown by at most
    // 1 / (1 - p), its output rounding u |out| <= u sum_j p_j |v_j| / (1 - p) included.
    const TcCase c{B, L, S, 0};
    const Reference r = tc_reference(q, k, v, c, Tensor(), params.scale, kBFloat16);
    const double u = dtype_unit_roundoff(kBFloat16);
    std::vector<double> tol(r.tol.size());
    for (size_t i = 0; i < tol.size(); ++i) tol[i] = 2 * (r.tol[i] + u * r.magnitude[i]) / (1 - params.dropout_p);
    EXPECT_TRUE(all_close_tol(outs[0], values(outs[1]), r.shape, tol)) << "D " << D;
    // Not the same kernel twice: the tensor-core one rounds the weights to bf16.
    EXPECT_NE(values(outs[0]), values(outs[1])) << "D " << D;
  }
}

}  // namespace
}  // namespace ember::test
