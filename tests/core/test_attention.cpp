// scaled_dot_product_attention (core/ops.h): against a float64 reference loop at awkward
// sizes (L, S, E of 0, 1, odd; broadcast batch dims; transposed and strided inputs;
// float64, float32, bfloat16: the bound, about 20 to 40 times the errors seen) with no
// mask, bool and float masks and the causal mask; fully masked rows; dropout; gradcheck and gradgradcheck; PyTorch reference cases (attention.safetensors,
// written by tests/refcases/attention_twin.py); and the argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "ember.h"
#include "attention_reference.h"
#include "refcase_util.h"
#include "reference.h"
#include "tests/device.h"

namespace ember::test {
namespace {

TEST(Attention, MatchesTheFloat64ReferenceAtAwkwardSizes) {
  struct Case {
    Shape qb, kb, vb;  // batch dims
    int64_t L, S, E, Ev;
    int mask_kind;
    Shape mask_shape;
    std::optional<double> scale;
    Layout layout;
  };
  const std::vector<Case> cases = {
      {{2, 3}, {2, 3}, {2, 3}, 5, 7, 4, 6, 0, {}, std::nullopt, Layout::Contiguous},
      {{}, {}, {}, 1, 1, 1, 1, 0, {}, std::nullopt, Layout::Contiguous},
      {{3}, {3}, {3}, 17, 9, 3, 5, 1, {17, 9}, std::nullopt, Layout::Transposed},
      {{2, 1}, {3}, {1, 3}, 6, 11, 8, 2, 2, {2, 1, 6, 11}, 0.7, Layout::Contiguous},
      {{2}, {2}, {2}, 9, 4, 5, 3, 3, {}, std::nullopt, Layout::Transposed},  // causal, L > S
      {{2}, {2}, {2}, 4, 9, 5, 3, 3, {}, std::nullopt, Layout::Strided},     // causal, L < S
      {{2}, {2}, {2}, 0, 5, 4, 3, 1, {0, 5}, std::nullopt, Layout::Contiguous},
      {{2}, {2}, {2}, 3, 0, 4, 3, 0, {}, std::nullopt, Layout::Contiguous},
      {{0}, {0}, {0}, 3, 5, 4, 3, 2, {3, 5}, std::nullopt, Layout::Contiguous},
      {{4}, {4}, {4}, 33, 40, 16, 16, 1, {4, 33, 40}, std::nullopt, Layout::Contiguous},
  };
  uint64_t seed = 100;
  for (DType dtype : {kFloat64, kFloat32, kBFloat16}) {
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const Case& c = cases[ci];
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " case " + std::to_string(ci));
      auto with = [](Shape b, int64_t r, int64_t col) {
        b.push_back(r);
        b.push_back(col);
        return b;
      };
      const Tensor q = random_tensor(with(c.qb, c.L, c.E), dtype, c.layout, ++seed);
      const Tensor k = random_tensor(with(c.kb, c.S, c.E), dtype, c.layout, ++seed);
      const Tensor v = random_tensor(with(c.vb, c.S, c.Ev), dtype, c.layout, ++seed);
      Tensor mask;
      if (c.mask_kind == 1) mask = bool_mask(c.mask_shape, ++seed);
      if (c.mask_kind == 2) mask = random_tensor(c.mask_shape, dtype, Layout::Contiguous, ++seed);
      const double scale = c.scale.value_or(1 / std::sqrt(static_cast<double>(c.E)));
      const Reference want = reference(q, k, v, c.mask_kind, mask, scale, dtype);
      const Tensor got = scaled_dot_product_attention(
          q, k, v, {.attn_mask = mask, .is_causal = c.mask_kind == 3, .scale = c.scale});
      EXPECT_DTYPE(got, dtype);
      EXPECT_TRUE(all_close_tol(got, want.out, want.shape, want.tol));
    }
  }
}

TEST(Attention, CausalIsTheTopLeftBoolMask) {
  for (auto [L, S] : {std::pair<int64_t, int64_t>{5, 8}, {8, 5}, {6, 6}}) {
    const Tensor q = random_tensor({2, L, 4}, kFloat64, Layout::Contiguous, 1);
    const Tensor k = random_tensor({2, S, 4}, kFloat64, Layout::Contiguous, 2);
    const Tensor v = random_tensor({2, S, 3}, kFloat64, Layout::Contiguous, 3);
    const Tensor tril = ge(arange(L).unsqueeze(1), arange(S).unsqueeze(0));
    EXPECT_TRUE(all_close(scaled_dot_product_attention(q, k, v, {.is_causal = true}),
                          scaled_dot_product_attention(q, k, v, {.attn_mask = tril}), 0, 0));
    // A float mask of 0 and -inf is the same bool mask too.
    const Tensor additive = where(tril, scalar_tensor(0.0, kFloat64), scalar_tensor(-kInf, kFloat64));
    EXPECT_TRUE(all_close(scaled_dot_product_attention(q, k, v, {.attn_mask = additive}),
                          scaled_dot_product_attention(q, k, v, {.attn_mask = tril}), 0, 0));
  }
}

// A query whose keys are all masked gets zero weights: a zero output and zero gradients
// (PyTorch >= 2.5's _safe_softmax), with no NaN anywhere, and the other rows unchanged.
TEST(Attention, FullyMaskedRowsGiveZeros) {
  const Tensor q = random_tensor({2, 4, 3}, kFloat64, Layout::Contiguous, 10);
  const Tensor k = random_tensor({2, 5, 3}, kFloat64, Layout::Contiguous, 11);
  const Tensor v = random_tensor({2, 5, 2}, kFloat64, Layout::Contiguous, 12);
  Tensor keep = bool_mask({2, 4, 5}, 13);
  keep.select(0, 1).select(0, 2).fill_(false);  // batch 1, query 2 sees nothing
  const Tensor additive = where(keep, scalar_tensor(0.0, kFloat64), scalar_tensor(-kInf, kFloat64));
  for (const Tensor& mask : {keep, additive}) {
    SCOPED_TRACE(dtype_name(mask.dtype()));
    const Tensor qq = q.detach(), kk = k.detach(), vv = v.detach();
    for (const Tensor* t : {&qq, &kk, &vv}) t->requires_grad_();
    const auto [out, weights] = scaled_dot_product_attention_math(qq, kk, vv, {.attn_mask = mask});
    const Reference want = reference(q, k, v, 1, keep, 1 / std::sqrt(3.0), kFloat64);
    EXPECT_TRUE(all_close_tol(out, want.out, want.shape, want.tol));
    EXPECT_EQ(values(out.select(0, 1).select(0, 2)), std::vector<double>(2, 0.0));
    EXPECT_EQ(values(weights.select(0, 1).select(0, 2)), std::vector<double>(5, 0.0));
    sum(out * out).backward();
    for (const Tensor* t : {&qq, &kk, &vv})
      for (double g : values(t->grad())) EXPECT_TRUE(std::isfinite(g));
    EXPECT_EQ(values(qq.grad().select(0, 1).select(0, 2)), std::vector<double>(3, 0.0));
  }
}

TEST(Attention, Dropout) {
  const Tensor q = random_tensor({2, 3, 16, 8}, kFloat64, Layout::Contiguous, 20);
  const Tensor k = random_tensor({2, 3, 32, 8}, kFloat64, Layout::Contiguous, 21);
  const Tensor v = random_tensor({2, 3, 32, 4}, kFloat64, Layout::Contiguous, 22);
  const double p = 0.25;
  const Tensor plain = scaled_dot_product_attention_math(q, k, v).second;
  Generator g1(5), g2(5);
  const auto [out, weights] = scaled_dot_product_attention_math(q, k, v, {.dropout_p = p, .generator = &g1});
  // Every weight is dropped or scaled by 1 / (1 - p); about p of them are dropped.
  const std::vector<double> w = values(weights), w0 = values(plain);
  int64_t dropped = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] == 0) {
      ++dropped;
    } else {
      EXPECT_NEAR(w[i], w0[i] / (1 - p), 1e-15);
    }
  }
  const double n = static_cast<double>(w.size()), frac = static_cast<double>(dropped) / n;
  EXPECT_NEAR(frac, p, 5 * std::sqrt(p * (1 - p) / n)) << "5 standard deviations of a binomial";
  EXPECT_TRUE(all_close(out, matmul(weights, v), 1e-14, 1e-14));
  // The same generator state gives the same draw (on the fused path too, which sums in
  // another order: float64 rounding over E + S = 40 terms); dropout_p 0 is no dropout; 1
  // drops all.
  EXPECT_TRUE(all_close(scaled_dot_product_attention(q, k, v, {.dropout_p = p, .generator = &g2}), out, 1e-13, 1e-14));
  EXPECT_TRUE(all_close(scaled_dot_product_attention(q, k, v, {.dropout_p = 0}), matmul(plain, v), 1e-13, 1e-14));
  for (double e : values(scaled_dot_product_attention(q, k, v, {.dropout_p = 1}))) EXPECT_EQ(e, 0.0);
}

TEST(Attention, GradcheckAndGradgradcheck) {
  auto leaf = [](const Shape& s, uint64_t seed) {
    Tensor t = random_tensor(s, kFloat64, Layout::Contiguous, seed);
    t.requires_grad_();
    return t;
  };
  const Tensor q = leaf({2, 3, 2}, 30), k = leaf({2, 4, 2}, 31), v = leaf({2, 4, 3}, 32);
  const Tensor keep = bool_mask({3, 4}, 33), additive = random_tensor({2, 1, 4}, kFloat64, Layout::Contiguous, 34);
  const std::vector<AttentionOptions> options = {
      {}, {.attn_mask = keep}, {.attn_mask = additive, .scale = 0.3}, {.is_causal = true}};
  for (size_t i = 0; i < options.size(); ++i) {
    SCOPED_TRACE("options " + std::to_string(i));
    const auto f = [&o = options[i]](const std::vector<Tensor>& x) {
      return scaled_dot_product_attention(x[0], x[1], x[2], o);
    };
    EXPECT_TRUE(grad_ok(f, {q, k, v}));
    try {
      gradgradcheck(f, {q, k, v});
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
  }
  // The additive mask is differentiable too (a learned bias, as ALiBi's).
  const Tensor bias = leaf({3, 4}, 35);
  EXPECT_TRUE(grad_ok(
      [](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = x[3]}); },
      {q, k, v, bias}));
}

TEST(Attention, PyTorchReferenceCases) {
  refcase::RefFile f = refcase::load("attention.safetensors", 17);
  int checked = 0;
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const refcase::json m = f.meta(i);
    if (m.at("op") != "sdpa") continue;
    SCOPED_TRACE("case " + std::to_string(i) + ": " + m.at("what").get<std::string>());
    Tensor q = f.field(i, "q"), k = f.field(i, "k"), v = f.field(i, "v");
    for (Tensor* t : {&q, &k, &v}) t->requires_grad_();
    AttentionOptions o{.is_causal = m.at("is_causal").get<bool>()};
    if (m.at("has_mask").get<bool>()) o.attn_mask = f.field(i, "attn_mask");
    if (!m.at("scale").is_null()) o.scale = m.at("scale").get<double>();
    const Tensor out = scaled_dot_product_attention(q, k, v, o);
    EXPECT_TRUE(all_close(out, f.field(i, "out"), 1e-10, 1e-12));
    sum(out * f.field(i, "grad_out")).backward();
    EXPECT_TRUE(all_close(q.grad(), f.field(i, "grad_q"), 1e-10, 1e-12));
    EXPECT_TRUE(all_close(k.grad(), f.field(i, "grad_k"), 1e-10, 1e-12));
    EXPECT_TRUE(all_close(v.grad(), f.field(i, "grad_v"), 1e-10, 1e-12));
    ++checked;
  }
  EXPECT_EQ(checked, 7);
}

TEST(Attention, ArgumentErrors) {
  const Tensor q = random_tensor({2, 3, 4}, kFloat64), k = random_tensor({2, 5, 4}, kFloat64);
  const Tensor v = random_tensor({2, 5, 6}, kFloat64);
  const char* op = "scaled_dot_product_attention";
  EXPECT_EMBER_ERROR(scaled_dot_product_attention(q, k, v, {.attn_mask = ones({3, 4}, kBool)}), op, "attn_mask",
                     "[3, 4]", "does not broadcast", "[2, 3, 5]");
  EXPECT_EMBER_ERROR(scaled_dot_product_attention(q, k, v, {.attn_mask = ones({2, 2, 3, 5}, kBool)}), op,
                     "does not broadcast");
  EXPECT_EMBER_ERROR(scaled_dot_product_attention(q, k, v, {.attn_mask = zeros({3, 5}, kFloat32)}), op, "attn_mask",
                     "float64", "float32");
  EXPECT_EMBER_ERROR(scaled_dot_product_attention(q, k, v, {.attn_mask = zeros({3, 5}, kInt64)}), op, "int64");
  EXPECT_EMBER_ERROR(scaled_dot_product_attention(q, k, v, {.attn_mask = ones({3, 5}, kBool), .is_causal = true}), op,
                     "not both");
  EXPECT_EMBER_ERROR(scaled_dot_product_attention(q, k, v, {.dropout_p = -0.1}), op, "dropout_p", "-0.1");
  EXPECT_EMBER_ERROR(scaled_dot_product_attention(q, k, v, {.dropout_p = 1.5}), op, "dropout_p");
  EXPECT_EMBER_ERROR(scaled_dot_product_attention(q, random_tensor({2, 5, 3}, kFloat64), v), op, "embedding dim",
                     "4 != 3");
  EXPECT_EMBER_ERROR(scaled_dot_product_attention(q, k, random_tensor({2, 4, 6}, kFloat64)), op, "sequence length");
  EXPECT_EMBER_ERROR(scaled_dot_product_attention(q, k.to(kFloat32), v), op, "one dtype");
  EXPECT_EMBER_ERROR(scaled_dot_product_attention(q, random_tensor({3, 5, 4}, kFloat64), v), op, "[2]", "[3]");
  EXPECT_EMBER_ERROR(scaled_dot_product_attention(random_tensor({4}, kFloat64), k, v), op, "at least 2 dims");
  EXPECT_EMBER_ERROR(scaled_dot_product_attention(q.to(kInt64), k.to(kInt64), v.to(kInt64)), op, "floating");
  EXPECT_EMBER_ERROR(scaled_dot_product_attention(Tensor(), k, v), op, "query");
}

}  // namespace
}  // namespace ember::test
