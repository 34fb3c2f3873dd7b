// Decode-shaped attention: a few query rows against a long key/value cache (Tk = 1000 and
// 4096, head dims 64 and 128), the shape of ember_gpt's KV-cache sampling. On a CUDA
// device the fused path takes the split-KV kernel (kernels/cuda/attention_decode.cuh) by
// itself there; EMBER_FLASH's "decode" forces it at short caches too (its chunks ending
// part-way, partials with no keys), "simt" turns it off. Checked against the float64 loop
// of attention_reference.h: no mask, bool masks with a fully masked row, additive masks,
// causal (top-left: the one query sees key 0) and the causal mask of the last rows of a
// cache (row i sees keys up to S - L + i); gradients through its out and lse; dropout's
// draw equal to the SIMT kernel's. On the CPU the same cases check the CPU kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attention_reference.h"
#include "ember.h"
#include "kernels/cuda/variants.h"
#include "reference.h"
#include "tests/device.h"

namespace ember::test {
namespace {

// EMBER_FLASH's choice for the scope, on a CUDA device (a no-op elsewhere).
class FlashVariant {
 public:
  explicit FlashVariant(const char* name) {
    if (!on_cuda()) return;
    saved_ = kernels::cuda::attention_variant();
    kernels::cuda::set_attention_variant(name);
  }
  ~FlashVariant() {
    if (on_cuda()) kernels::cuda::set_attention_variant(saved_);
  }
  FlashVariant(const FlashVariant&) = delete;
  FlashVariant& operator=(const FlashVariant&) = delete;

 private:
  std::string saved_;
};

struct DecodeCase {
  int64_t B, L, S, D;
  int mask_kind;  // 0 none, 1 bool (last batch's row L / 2 fully masked), 2 additive [L, S], 3 causal, 4 cache-causal
};

// Row i of the last L rows of a cache of S sees keys 0 .. S - L + i (bool, true: takes part).
Tensor cache_causal(int64_t L, int64_t S) {
  const TensorOptions idx{kInt64, test_device()};
  return ge(arange(static_cast<double>(S - L), static_cast<double>(S), 1, idx).unsqueeze(1),
            arange(0, static_cast<double>(S), 1, idx).unsqueeze(0));
}

Tensor decode_mask(const DecodeCase& c, DType dtype, uint64_t seed) {
  if (c.mask_kind == 1) {
    Tensor m = bool_mask({c.B, c.L, c.S}, seed);
    m.select(0, c.B - 1).select(0, c.L / 2).fill_(false);
    return m;
  }
  if (c.mask_kind == 2) return random_tensor({c.L, c.S}, dtype, Layout::Contiguous, seed);
  if (c.mask_kind == 4) return cache_causal(c.L, c.S);
  return {};
}

// Runs case c at dtype and checks out (and, for float32 and float64, the gradients); on a
// CUDA device, that the split-KV kernel computed the forward.
void check_case(const DecodeCase& c, DType dtype, uint64_t& seed) {
  std::vector<Tensor> x = {random_tensor({c.B, c.L, c.D}, dtype, Layout::Contiguous, ++seed),
                           random_tensor({c.B, c.S, c.D}, dtype, Layout::Contiguous, ++seed),
                           random_tensor({c.B, c.S, c.D}, dtype, Layout::Contiguous, ++seed)};
  const Tensor dout = random_tensor({c.B, c.L, c.D}, dtype, Layout::Contiguous, ++seed);
  const Tensor mask = decode_mask(c, dtype, ++seed);
  const int kind = c.mask_kind == 4 ? 1 : c.mask_kind;
  const bool narrow = dtype == kBFloat16 || dtype == kFloat16;
  for (Tensor& t : x) t.requires_grad_(!narrow);
  const double scale = 1 / std::sqrt(static_cast<double>(c.D));
  const Tensor out = scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = mask, .is_causal = kind == 3});
  if (on_cuda()) EXPECT_EQ(kernels::cuda::attention_last_forward(), "decode");
  // 16-bit inputs are computed in float32 and rounded once (test_attention_fused.cpp).
  Reference want = reference(x[0], x[1], x[2], kind, mask, scale, narrow ? kFloat32 : dtype);
  if (narrow)
    for (size_t i = 0; i < want.out.size(); ++i)
      want.tol[i] += dtype_unit_roundoff(dtype) * (std::fabs(want.out[i]) + want.magnitude[i]) + dtype_underflow(dtype);
  EXPECT_TRUE(all_close_tol(out, want.out, want.shape, want.tol));
  if (narrow) return;
  out.backward(dout);
  const GradReference g = reference_grads(x[0], x[1], x[2], dout, kind, mask, scale, dtype);
  const Reference* refs[3] = {&g.dq, &g.dk, &g.dv};
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(all_close_tol(x[i].grad(), refs[i]->out, refs[i]->shape, refs[i]->tol)) << "input " << i;
}

std::string trace(const DecodeCase& c, DType dtype) {
  return std::string(dtype_name(dtype)) + " B " + std::to_string(c.B) + " L " + std::to_string(c.L) + " S " +
         std::to_string(c.S) + " D " + std::to_string(c.D) + " mask " + std::to_string(c.mask_kind);
}

TEST(DecodeAttention, LongCachesMatchTheFloat64Reference) {
  const AttentionPath flash("flash");
  const FlashVariant automatic("auto");  // picks the split-KV kernel at these shapes
  const std::vector<DecodeCase> cases = {
      {2, 1, 1000, 64, 0}, {1, 1, 4096, 128, 0}, {2, 1, 1000, 128, 1}, {1, 3, 4096, 64, 2},
      {2, 1, 1000, 64, 3}, {1, 4, 4096, 128, 4}, {2, 2, 1000, 64, 4},
  };
  uint64_t seed = 6000;
  for (const DecodeCase& c : cases)
    for (DType dtype : {kFloat32, kBFloat16}) {
      SCOPED_TRACE(trace(c, dtype));
      check_case(c, dtype, seed);
    }
}

// Forced at short caches and odd sizes: chunks of 32-key tiles ending part-way, more
// partials than keys (S = 1, 17), float64 and f16.
TEST(DecodeAttention, ForcedAtShortCaches) {
  const AttentionPath flash("flash");
  const FlashVariant decode("decode");
  const std::vector<DecodeCase> cases = {
      {2, 1, 1, 8, 0}, {1, 4, 17, 40, 3}, {2, 3, 130, 80, 1}, {1, 2, 65, 256, 2}, {3, 1, 200, 64, 4},
  };
  uint64_t seed = 7000;
  for (const DecodeCase& c : cases)
    for (DType dtype : {kFloat64, kFloat32, kFloat16}) {
      SCOPED_TRACE(trace(c, dtype));
      if (on_cuda() && dtype == kFloat64 && c.D > 128) continue;  // the CUDA kernels' float64 limit
      check_case(c, dtype, seed);
    }
}

// On a CUDA device, with dropout: the split-KV kernel and the SIMT kernel drop the same
// weights (one Philox draw per weight); float64, so both are within a few ulps of the
// exact sum of the same kept terms (S + Ev roundings of magnitude below 1 / (1 - p) |v|).
TEST(DecodeAttention, DropoutDrawsAsTheSimtKernel) {
  if (!on_cuda()) GTEST_SKIP() << "compares the CUDA backend's kernels (EMBER_TEST_DEVICE=cuda)";
  const AttentionPath flash("flash");
  const int64_t B = 2, L = 2, S = 1000, D = 64;
  const Tensor q = random_tensor({B, L, D}, kFloat64, Layout::Contiguous, 81);
  const Tensor k = random_tensor({B, S, D}, kFloat64, Layout::Contiguous, 82);
  const Tensor v = random_tensor({B, S, D}, kFloat64, Layout::Contiguous, 83);
  std::vector<Tensor> outs;
  for (const char* variant : {"auto", "simt"}) {
    const FlashVariant forced(variant);
    Generator gen(5);
    outs.push_back(scaled_dot_product_attention(q, k, v, {.dropout_p = 0.3, .generator = &gen}));
    EXPECT_EQ(kernels::cuda::attention_last_forward(), std::string(variant) == "auto" ? "decode" : "simt");
  }
  EXPECT_TRUE(all_close(outs[0], outs[1], 1e-12, 1e-12));
}

}  // namespace
}  // namespace ember::test
