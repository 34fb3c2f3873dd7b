// scaled_dot_product_attention: argument checks with PyTorch 2's rules, and the math path
// composed from matmul, softmax and dropout (so autograd differentiates it, twice too,
// on every backend). The fused kernels of the next issue plug in behind the same entry
// point; the math path stays as their reference.
#include <cmath>
#include <limits>

#include "core/autograd.h"
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

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  return scaled_dot_product_attention_math(q, k, v, o).first;
}

}  // namespace ember
