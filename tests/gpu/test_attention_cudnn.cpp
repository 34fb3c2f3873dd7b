// cuDNN's fused attention (EMBER_ATTENTION=cudnn, kernels/cuda/attention_cudnn.h) on the
// GPU (label `gpu`; skipped where there is no CUDA device; in the EMULATED build, which
// has no cuDNN, the same calls take the flash kernels and are checked the same way): the
// forward against the float64 loop of tests/core/attention_reference.h in bf16 and f16 at
// head dims 64 and 128, T = 1 (decode against 1000 keys), 129 and 1000 with Tq != Tk; the
// gradients, which the hand-written backward computes from cuDNN's output and softmax
// statistics (so they check that those statistics are the lse it takes); and the calls
// cuDNN's one operation cannot express in cuDNN 9.19 (causal, masks, dropout), which fall
// back to the flash kernels. Each check says which kernel ran (variants.h's
// attention_last_forward) and its largest error beside its tolerance. The emulated build
// runs smaller cases (T up to 200).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/device_runtime.h"
#include "ember.h"
#include "kernels/cuda/variants.h"
#include "tests/core/attention_reference.h"
#include "tests/core/reference.h"

namespace ember::test {
namespace {

bool have_gpu() { return kernels::cuda_backend_built() && kernels::cuda_device_count() > 0; }

// Whether this build has cuDNN: set_conv_variant("cudnn") is an ember::Error otherwise.
bool have_cudnn() {
  const std::string saved = kernels::cuda::conv_variant();
  try {
    kernels::cuda::set_conv_variant("cudnn");
  } catch (const Error&) {
    return false;
  }
  kernels::cuda::set_conv_variant(saved);
  return true;
}

struct Case {
  int64_t BH, L, S, D;
  int mask_kind;  // 0 none (cuDNN's), 1 bool, 3 causal, 5 dropout (the flash kernels')
};

// The tensor-core bound (tests/core/test_attention_tensor_core.cpp): float32 computation,
// the weights rounded to the dtype before P V, the output rounded once.
Reference bound(const Tensor& q, const Tensor& k, const Tensor& v, int kind, const Tensor& mask, double scale,
                DType dtype) {
  Reference r = reference(q, k, v, kind, mask, scale, kFloat32);
  const double u = dtype_unit_roundoff(dtype);
  for (size_t i = 0; i < r.out.size(); ++i)
    r.tol[i] += u * (std::fabs(r.out[i]) + r.magnitude[i]) + dtype_underflow(dtype);
  return r;
}

TEST(CudnnAttention, MatchesTheFloat64Reference) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device (or a CPU-only build)";
  const AttentionPath cudnn("cudnn");
  const bool with_cudnn = have_cudnn();
  const Device dev = Device::cuda(0);
#if defined(EMBER_CUDA_EMULATED)  // the flash kernels on the emulator: T = 1000 would take minutes
  const std::vector<Case> cases = {{2, 65, 70, 0}, {2, 1, 200, 0}, {2, 33, 17, 3}, {1, 17, 65, 1}};
#else
  const std::vector<Case> cases = {{6, 129, 129, 0}, {2, 1000, 997, 0}, {4, 1, 1000, 0}, {2, 129, 70, 3},
                                   {2, 65, 129, 1}};
#endif
  uint64_t seed = 9000;
  for (DType dtype : {kBFloat16, kFloat16})
    for (int64_t D : {64, 128})
      for (const Case& c : cases) {
        const std::string what = std::string(dtype_name(dtype)) + " D " + std::to_string(D) + " BH " +
                                 std::to_string(c.BH) + " L " + std::to_string(c.L) + " S " + std::to_string(c.S) +
                                 " mask " + std::to_string(c.mask_kind);
        SCOPED_TRACE(what);
        std::vector<Tensor> x = {random_tensor({c.BH, c.L, D}, dtype, Layout::Contiguous, ++seed).to(dev),
                                 random_tensor({c.BH, c.S, D}, dtype, Layout::Contiguous, ++seed).to(dev),
                                 random_tensor({c.BH, c.S, D}, dtype, Layout::Contiguous, ++seed).to(dev)};
        const Tensor dout = random_tensor({c.BH, c.L, D}, dtype, Layout::Contiguous, ++seed).to(dev);
        const Tensor mask = c.mask_kind == 1 ? bool_mask({c.BH, c.L, c.S}, ++seed).to(dev) : Tensor();
        for (Tensor& t : x) t.requires_grad_();
        const double scale = 1 / std::sqrt(static_cast<double>(D));
        const Tensor out =
            scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = mask, .is_causal = c.mask_kind == 3});
        const std::string ran = kernels::cuda::attention_last_forward();
        if (with_cudnn) EXPECT_EQ(ran == "cudnn", c.mask_kind == 0) << "ran " << ran;
        const Reference want = bound(x[0], x[1], x[2], c.mask_kind, mask, scale, dtype);
        EXPECT_TRUE(all_close_tol(out, want.out, want.shape, want.tol)) << "ran " << ran;
        out.backward(dout);
        const GradReference g = reference_grads(x[0], x[1], x[2], dout, c.mask_kind, mask, scale, kFloat32);
        const double u = dtype_unit_roundoff(dtype);
        const Reference* refs[3] = {&g.dq, &g.dk, &g.dv};
        for (int i = 0; i < 3; ++i) {
          std::vector<double> tol = refs[i]->tol;
          for (size_t e = 0; e < tol.size(); ++e)
            tol[e] += u * (2 * refs[i]->magnitude[e] + std::fabs(refs[i]->out[e])) + dtype_underflow(dtype);
          EXPECT_TRUE(all_close_tol(x[i].grad(), refs[i]->out, refs[i]->shape, tol))
              << "input " << i << ", ran " << ran;
        }
        std::printf("%s: forward by %s\n", what.c_str(), ran.c_str());
      }
}

// Dropout is the flash kernels' (cuDNN's operation has none here): the same Philox draw
// as EMBER_ATTENTION=flash, so the same output bits.
TEST(CudnnAttention, DropoutFallsBackToTheFlashKernels) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device (or a CPU-only build)";
  const Device dev = Device::cuda(0);
  const Tensor q = random_tensor({2, 65, 64}, kBFloat16, Layout::Contiguous, 1).to(dev);
  const Tensor k = random_tensor({2, 129, 64}, kBFloat16, Layout::Contiguous, 2).to(dev);
  const Tensor v = random_tensor({2, 129, 64}, kBFloat16, Layout::Contiguous, 3).to(dev);
  std::vector<std::vector<double>> outs;
  for (const char* path : {"cudnn", "flash"}) {
    const AttentionPath forced(path);
    Generator gen(11);
    outs.push_back(values(scaled_dot_product_attention(q, k, v, {.dropout_p = 0.2, .generator = &gen})));
    EXPECT_NE(kernels::cuda::attention_last_forward(), "cudnn") << path;
  }
  EXPECT_EQ(outs[0], outs[1]);
}

}  // namespace
}  // namespace ember::test
