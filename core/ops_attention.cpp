// scaled_dot_product_attention: argument checks with PyTorch 2's rules, the math path
// composed from matmul, softmax and dropout (so autograd differentiates it, twice too,
// on every backend; it stays as the reference), and the fused path: the attention stubs
// (core/dispatch.h), whose memory is linear in the sequence length (Note [Attention path]).
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>

#include "core/autograd.h"
#include "core/autograd_graph.h"
#include "core/dispatch.h"
#include "core/meta.h"
#include "core/op_utils.h"

namespace ember {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

Shape batch_of(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

// Checks q, k, v and the options against the attention scores' shape [batch..., L, S].
void check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  detail::check_defined(op, q, "query");
  detail::check_defined(op, k, "key");
  detail::check_defined(op, v, "value");
  detail::check_same_device(op, {&q, &k, &v, &o.attn_mask});
  EMBER_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, op,
              ": query, key and value need at least 2 dims ([..., L, E], [..., S, E], [..., S, Ev]), got ",
              shape_str(q.shape()), ", ", shape_str(k.shape()), " and ", shape_str(v.shape()));
  EMBER_CHECK(is_floating(q.dtype()), op, ": expects floating tensors, got ", dtype_name(q.dtype()));
  EMBER_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), op,
              ": query, key and value must have one dtype, got ", dtype_name(q.dtype()), ", ", dtype_name(k.dtype()),
              " and ", dtype_name(v.dtype()));
  EMBER_CHECK(k.size(-1) == q.size(-1), op, ": query ", shape_str(q.shape()), " and key ", shape_str(k.shape()),
              " differ in the embedding dim (", q.size(-1), " != ", k.size(-1), ")");
  EMBER_CHECK(v.size(-2) == k.size(-2), op, ": key ", shape_str(k.shape()), " and value ", shape_str(v.shape()),
              " differ in the sequence length (", k.size(-2), " != ", v.size(-2), ")");
  Shape scores = broadcast_shapes(broadcast_shapes(batch_of(q), batch_of(k), op), batch_of(v), op);
  scores.push_back(q.size(-2));
  scores.push_back(k.size(-2));
  EMBER_CHECK(o.dropout_p >= 0 && o.dropout_p <= 1, op, ": dropout_p must be in [0, 1], got ", o.dropout_p);
  if (o.scale) EMBER_CHECK(std::isfinite(*o.scale), op, ": scale must be finite, got ", *o.scale);
  if (const Tensor& m = o.attn_mask; m.defined()) {
    EMBER_CHECK(!o.is_causal, op, ": pass attn_mask or is_causal, not both");
    EMBER_CHECK(m.dtype() == kBool || m.dtype() == q.dtype(), op, ": attn_mask must be bool (true: takes part) or ",
                "an additive mask of the query's dtype ", dtype_name(q.dtype()), ", got ", dtype_name(m.dtype()));
    bool fits = m.dim() <= static_cast<int64_t>(scores.size());
    for (int64_t i = 1; fits && i <= m.dim(); ++i) {
      const int64_t have = m.size(-i), want = scores[scores.size() - static_cast<size_t>(i)];
      fits = have == want || have == 1;
    }
    EMBER_CHECK(fits, op, ": attn_mask ", shape_str(m.shape()), " does not broadcast to the attention scores ",
                shape_str(scores), " ([batch..., L, S])");
  }
}

}  // namespace

std::pair<Tensor, Tensor> scaled_dot_product_attention_math(const Tensor& q, const Tensor& k, const Tensor& v,
                                                            const AttentionOptions& o) {
  EMBER_OP_SITE("scaled_dot_product_attention");
  const char* op = "scaled_dot_product_attention";
  check_attention(op, q, k, v, o);
  const int64_t L = q.size(-2), S = k.size(-2);
  const double scale = o.scale.value_or(1 / std::sqrt(static_cast<double>(q.size(-1))));
  // Scaling q costs L * E multiplications where scaling the scores would cost L * S.
  Tensor scores = matmul(mul(q, Scalar(scale)), k.transpose(-2, -1));
  const Tensor neg_inf = scalar_tensor(kNegInf, {q.dtype(), q.device()});
  if (o.is_causal) {  // top-left: query i sees keys 0..i
    const TensorOptions idx{kInt64, q.device()};
    const Tensor keep = ge(arange(0, static_cast<double>(L), 1, idx).unsqueeze(1),
                           arange(0, static_cast<double>(S), 1, idx).unsqueeze(0));
    scores = where(keep, scores, neg_inf);
  } else if (o.attn_mask.defined()) {
    scores = o.attn_mask.dtype() == kBool ? where(o.attn_mask, scores, neg_inf) : add(scores, o.attn_mask);
  }
  Tensor weights;
  if (o.attn_mask.defined() && S > 0) {
    // A row whose scores are all -inf attends to nothing: zero weights, so a zero output
    // and zero gradients, where a plain softmax gives NaN (PyTorch's _safe_softmax). The
    // softmax runs on zeros there, so its saved output and its backward stay finite.
    Tensor masked_row;
    {
      NoGradGuard no_grad;
      masked_row = eq(amax(scores, {-1}, true), Scalar(kNegInf));
    }
    const Tensor zero = zeros({}, {q.dtype(), q.device()});
    weights = where(masked_row, zero, softmax(where(masked_row, zero, scores), -1));
  } else {
    weights = softmax(scores, -1);
  }
  if (o.dropout_p > 0)
    weights = o.dropout_p >= 1 ? mul(weights, Scalar(0.0)) : dropout(weights, o.dropout_p, true, o.generator);
  return {matmul(weights, v), weights};
}

// Note [Attention path]
// scaled_dot_product_attention takes the fused kernels (the attention stubs) where they
// can compute the call, and the math path otherwise: when the device has no fused kernel
// (meta tensors stand for meta_target()'s device), the head dims exceed the CUDA kernel's 256 (128 in float64),
// dropout_p is 1, or an additive mask requires grad (its gradient is the L x S matrix dS
// that the fused backward never stores). EMBER_ATTENTION, read at each call, forces a
// path: "math", or "flash" (then a call the fused kernels cannot compute is an
// ember::Error saying why); "auto" or unset picks as above; "cudnn" picks as auto, and
// the CUDA backend then runs cuDNN's fused attention where cuDNN takes the call
// (kernels/cuda/attention_cudnn.h), its hand-written kernels elsewhere. As EMBER_CONV,
// another value is reported once on stderr and ignored (auto).
// scaled_dot_product_attention_math is always the math path.
//
// The fused path folds the batch dims into one, BH (q, k and v broadcast and made
// contiguous: copies only where they were not), turns a bool mask into an additive one
// (0 or -inf, in the compute dtype: float32 for 16-bit inputs) at the mask's own shape
// and passes it broadcast as a strided view, copied only when the broadcast batch dims
// cannot fold into one stride. Its backward node saves q, k, v, out, the per-row lse, the
// mask and the Philox state; dropout takes the Philox blocks the math path's dropout
// would, so both paths drop the same weights for the same generator state.
namespace {

enum class AttentionPath { Auto, Math, Flash };

AttentionPath attention_path() {
  const char* env = std::getenv("EMBER_ATTENTION");
  const std::string_view s = env ? env : "";
  if (s.empty() || s == "auto" || s == "cudnn") return AttentionPath::Auto;
  if (s == "math") return AttentionPath::Math;
  if (s == "flash") return AttentionPath::Flash;
  EMBER_FAIL("EMBER_ATTENTION=", s, ": expected auto, math, flash or cudnn");
}

// Why the fused kernels cannot compute this call; empty when they can.
std::string fused_refusal(const Tensor& q, const Tensor& v, const AttentionOptions& o) {
  // Meta tensors take the path of the device they stand for, so that a memory estimate
  // allocates what the fused kernels' run does (the stub call itself is skipped on meta).
  const DeviceType d = q.device().is_meta() ? meta_target() : q.device().type;
  if (!kernels::attention_stub.has(d) || !kernels::attention_backward_stub.has(d))
    return "the " + q.device().str() + " device has no fused attention kernel";
  // The CUDA kernel's tiles in shared memory: head dims up to 256 (128 in float64).
  const int64_t max_head = q.dtype() == kFloat64 ? 128 : 256;
  if (d == DeviceType::CUDA && (q.size(-1) > max_head || v.size(-1) > max_head))
    return "the CUDA kernel takes " + std::string(dtype_name(q.dtype())) + " head dims up to " +
           std::to_string(max_head) + ", got " + std::to_string(q.size(-1)) + " and " + std::to_string(v.size(-1));
  if (o.dropout_p >= 1) return "dropout_p is 1";
  if (o.attn_mask.defined() && o.attn_mask.requires_grad() && grad_enabled())
    return "the additive mask requires grad";
  return {};
}

Shape with_dims(Shape s, int64_t a, int64_t b) {
  s.push_back(a);
  s.push_back(b);
  return s;
}

// The gradients of q, k and v written with differentiable ops (for create_graph): the
// math path's weights, dropout's factors replayed from the same generator state.
std::vector<Tensor> composed_grads(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                   const AttentionOptions& o, double scale, kernels::PhiloxState philox) {
  AttentionOptions plain = o;
  plain.dropout_p = 0;
  const Tensor p = scaled_dot_product_attention_math(q, k, v, plain).second;
  Tensor dp = matmul(g, v.transpose(-2, -1)), applied = p;
  if (o.dropout_p > 0) {
    Generator gen(philox.seed);
    gen.set_offset(philox.offset);
    const Tensor z = dropout(ones(p.shape(), {p.dtype(), p.device()}), o.dropout_p, true, &gen);
    dp = mul(dp, z);
    applied = mul(p, z);
  }
  const Tensor ds = mul(p, sub(dp, sum(mul(dp, p), {-1}, true)));
  return {mul(matmul(ds, k), Scalar(scale)), mul(matmul(ds.transpose(-2, -1), q), Scalar(scale)),
          matmul(applied.transpose(-2, -1), g)};
}

Tensor attention_fused(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const AttentionOptions& o) {
  const Shape batch = broadcast_shapes(broadcast_shapes(batch_of(q_in), batch_of(k_in), "scaled_dot_product_attention"),
                                       batch_of(v_in), "scaled_dot_product_attention");
  const int64_t L = q_in.size(-2), S = k_in.size(-2), E = q_in.size(-1), Ev = v_in.size(-1);
  int64_t BH = 1;
  for (int64_t b : batch) BH *= b;
  auto fold = [&](const Tensor& t, int64_t rows, int64_t cols) {
    return t.expand(with_dims(batch, rows, cols)).contiguous().reshape({BH, rows, cols});
  };
  const Tensor q = fold(q_in, L, E), k = fold(k_in, S, E), v = fold(v_in, S, Ev);
  const DType compute = q.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const TensorOptions copts{compute, q.device()};
  Tensor mask;
  if (o.attn_mask.defined()) {
    const Tensor m = o.attn_mask.detach();
    const Tensor additive = m.dtype() == kBool
                                ? where(m, zeros({}, copts), scalar_tensor(kNegInf, copts))
                                : m.to(compute);
    mask = additive.expand(with_dims(batch, L, S)).reshape({BH, L, S});  // a view where the strides allow
  }
  const double scale = o.scale.value_or(1 / std::sqrt(static_cast<double>(E)));
  kernels::PhiloxState philox{0, 0};
  if (o.dropout_p > 0) {  // the Philox blocks dropout() takes for the math path's [batch..., L, S] weights
    Generator& g = o.generator ? *o.generator : default_generator();
    const uint64_t per_block = q.dtype() == kFloat64 ? 2 : 4;
    philox = {g.seed(), g.advance((static_cast<uint64_t>(BH * L * S) + per_block - 1) / per_block)};
  }
  const kernels::AttentionParams params{scale, o.is_causal, o.dropout_p, philox};
  Tensor out = empty({BH, L, Ev}, {q.dtype(), q.device()}), lse = empty({BH, L}, copts);
  if (BH * L > 0) kernels::attention_stub(q.device(), out, lse, q.detach(), k.detach(), v.detach(), mask, params);
  AttentionOptions replay = o;  // for create_graph: the math path on the folded inputs
  replay.attn_mask = o.attn_mask.defined() ? o.attn_mask.detach() : Tensor();
  replay.scale = scale;
  replay.generator = nullptr;  // the replay draws from the saved Philox state
  return autograd::record("scaled_dot_product_attention", {q, k, v}, out.view(with_dims(batch, L, Ev)),
                          [q, k, v, saved = autograd::SavedOutput(out), lse, mask, params, replay,
                           batch](const Tensor& g) {
    const int64_t BH = q.size(0), L = q.size(1), S = k.size(1);
    if (grad_enabled()) {
      // The mask folded as q, k and v were, only here: a copy where its batch dims do not fold.
      AttentionOptions folded = replay;
      if (folded.attn_mask.defined())
        folded.attn_mask = folded.attn_mask.expand(with_dims(batch, L, S)).reshape({BH, L, S});
      return composed_grads(q, k, v, g.reshape({BH, L, v.size(2)}), folded, params.scale, params.philox);
    }
    const Tensor out = saved.get();
    const Tensor dout = g.to(q.dtype()).contiguous().reshape(out.shape());
    Tensor dq = empty_like(q), dk = empty_like(k), dv = empty_like(v);
    if (BH * L > 0 && S > 0) {
      kernels::attention_backward_stub(q.device(), dq, dk, dv, dout, q.detach(), k.detach(), v.detach(), out, lse,
                                       mask, params);
    } else {
      for (Tensor* t : {&dq, &dk, &dv}) t->zero_();
    }
    return std::vector<Tensor>{dq, dk, dv};
  });
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  EMBER_OP_SITE("scaled_dot_product_attention");
  const char* op = "scaled_dot_product_attention";
  const AttentionPath path = attention_path();
  if (path != AttentionPath::Math) {
    check_attention(op, q, k, v, o);
    const std::string refusal = fused_refusal(q, v, o);
    if (refusal.empty()) return attention_fused(q, k, v, o);
    EMBER_CHECK(path == AttentionPath::Auto, op, ": EMBER_ATTENTION=flash, but the fused kernels cannot compute ",
                "this call: ", refusal);
  }
  return scaled_dot_product_attention_math(q, k, v, o).first;
}

}  // namespace ember
