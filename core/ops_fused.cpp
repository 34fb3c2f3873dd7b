// The fused neural-network ops: cross entropy, layer norm, batch-norm statistics and
// training-mode batch norm, embedding and dropout. Each checks its arguments, calls one
// stub of core/dispatch.h forward and one backward (the backends' fused kernels), and
// saves what its backward needs (row statistics, the keep mask), where the composed
// forms these replace saved every intermediate.
#include "core/autograd.h"
#include "core/autograd_graph.h"
#include "core/dispatch.h"
#include "core/norm_composed.h"
#include "core/op_utils.h"

namespace ember {
namespace {

// The indices of `t` (any integer dtype) as int64, checked by the backend to lie in
// [0, n) unless equal to `skip` (on the CPU at once; on a GPU at the next synchronization:
// kernels::CheckIndexRangeFn). The kernels never read out of range either way.
Tensor checked_indices(const Tensor& t, int64_t n, kernels::IndexCheck kind, std::optional<int64_t> skip = std::nullopt) {
  const char* op = kind == kernels::IndexCheck::kCrossEntropyTarget ? "cross_entropy"
                   : kind == kernels::IndexCheck::kEmbeddingIndex   ? "embedding"
                                                                    : "embedding_backward";
  EMBER_CHECK(t.dtype() == kInt64 || t.dtype() == kInt32, op, ": ",
              kind == kernels::IndexCheck::kCrossEntropyTarget ? "target" : "index", " must be int64 or int32, got ",
              dtype_name(t.dtype()));
  Tensor idx = t.to(kInt64).contiguous();
  if (idx.numel() > 0) kernels::check_index_range_stub(idx.device(), idx, n, skip, kind);
  return idx;
}

kernels::LossReduction to_kernel(Reduction r) {
  return r == Reduction::None ? kernels::LossReduction::kNone
                              : (r == Reduction::Mean ? kernels::LossReduction::kMean : kernels::LossReduction::kSum);
}

// cross_entropy's gradient of its rows of logits x [n, C], composed from differentiable
// ops for a create_graph backward (the fused kernel has no derivative): row i gets
// s_i (softmax(x_i) A_i - a_i), with a_i the row's target distribution times the class
// weights, (1 - eps) w[t_i] one_hot(t_i) + eps / C w (zero for an ignored row),
// A_i = sum(a_i), and s_i the output gradient's share of the row (over the total weight
// for the mean). t: int64 [n]; g: [n] (none) or [] (sum, mean).
Tensor cross_entropy_grad_composed(const Tensor& x, const Tensor& t, const Tensor& g, const Tensor& total,
                                   const kernels::CrossEntropyOptions& o) {
  const int64_t C = x.size(1);
  const Tensor valid = ne(t, Scalar(o.ignore_index));
  const Tensor safe = where(valid, t, zeros_like(t));
  const Tensor w = o.weight.defined() ? o.weight : ones({C}, {x.dtype(), x.device()});
  Tensor a = mul(mul(one_hot(safe, C).to(x.dtype()), w), Scalar(1 - o.label_smoothing));
  if (o.label_smoothing > 0) a = add(a, mul(w, Scalar(o.label_smoothing / static_cast<double>(C))));
  a = mul(a, valid.to(x.dtype()).unsqueeze(1));
  const Tensor r = sub(mul(softmax(x, 1), sum(a, {1}, true)), a);
  const Tensor gx = g.to(x.dtype());
  switch (o.reduction) {
    case kernels::LossReduction::kNone: return mul(r, gx.reshape({-1, 1}));
    case kernels::LossReduction::kSum: return mul(r, gx);
    case kernels::LossReduction::kMean: break;
  }
  return mul(r, div(gx, total));
}

}  // namespace

std::pair<Tensor, Tensor> detail::normalize_composed(const Tensor& x, const std::vector<int64_t>& dims, double eps) {
  const Tensor xc = sub(x, mean(x, dims, true));
  const Tensor rstd = rsqrt(add(mean(mul(xc, xc), dims, true), Scalar(eps)));
  return {mul(xc, rstd), rstd};
}

Tensor detail::normalized_input_grad(const Tensor& g, const Tensor& xhat, const Tensor& rstd,
                                     const std::vector<int64_t>& dims) {
  return mul(rstd, sub(sub(g, mean(g, dims, true)), mul(xhat, mean(mul(g, xhat), dims, true))));
}

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target, int64_t ignore_index, Reduction reduction,
                     const Tensor& weight, double label_smoothing) {
  EMBER_OP_SITE("cross_entropy");
  detail::check_defined("cross_entropy", logits_in);
  detail::check_defined("cross_entropy", target, "target");
  detail::check_same_device("cross_entropy", {&logits_in, &target, &weight});
  EMBER_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy: label_smoothing must be in [0, 1], got ",
              label_smoothing);
  EMBER_CHECK(reduction != Reduction::BatchMean, "cross_entropy: reduction batchmean is kl_div's only");
  EMBER_CHECK(logits_in.dim() >= 2, "cross_entropy: expects logits [N, C, ...], got ", shape_str(logits_in.shape()));
  EMBER_CHECK(is_floating(logits_in.dtype()), "cross_entropy: expects floating logits, got ",
              dtype_name(logits_in.dtype()));
  Shape rest = logits_in.shape();
  const int64_t C = rest[1];
  rest.erase(rest.begin() + 1);
  EMBER_CHECK(target.shape() == rest, "cross_entropy: target ", shape_str(target.shape()), " does not match logits ",
              shape_str(logits_in.shape()), " (expected ", shape_str(rest), ")");
  // 16-bit logits compute in float32: a bf16 loss would have 3 significant digits.
  const DType dtype = logits_in.dtype() == kFloat64 ? kFloat64 : kFloat32;
  Tensor x = logits_in.to(dtype);
  if (x.dim() > 2) {  // [N, C, d...] -> rows [N * d..., C]
    Shape perm{0};
    for (int64_t d = 2; d < x.dim(); ++d) perm.push_back(d);
    perm.push_back(1);
    x = x.permute(perm);
  }
  x = x.contiguous().reshape({-1, C});
  const int64_t n = x.size(0);
  EMBER_CHECK(n == 0 || C > 0, "cross_entropy: ", n, " rows of 0 classes");
  const Tensor t = checked_indices(target, C, kernels::IndexCheck::kCrossEntropyTarget, ignore_index).reshape({-1});
  kernels::CrossEntropyOptions o{
      .ignore_index = ignore_index, .reduction = to_kernel(reduction), .weight = {}, .weight_sum = {},
      .label_smoothing = label_smoothing};
  if (weight.defined()) {
    EMBER_CHECK(weight.dim() == 1 && weight.size(0) == C, "cross_entropy: weight must be [", C, "] (one per class), got ",
                shape_str(weight.shape()));
    EMBER_CHECK(is_floating(weight.dtype()), "cross_entropy: weight must be floating, got ", dtype_name(weight.dtype()));
    o.weight = weight.detach().to(dtype).contiguous();
    o.weight_sum = sum(o.weight);
  }
  const TensorOptions opts{dtype, x.device()};
  Tensor loss = reduction == Reduction::None ? empty({n}, opts) : empty({}, opts);
  Tensor stats = empty({n, 2}, opts), total = empty({}, opts);
  kernels::cross_entropy_stub(x.device(), loss, stats, total, x.detach(), t, o);
  if (reduction == Reduction::None) loss = loss.view(rest);
  return autograd::record("cross_entropy", {x}, loss, [x, t, stats, total, o](const Tensor& g) {
    if (grad_enabled()) return std::vector<Tensor>{cross_entropy_grad_composed(x, t, g, total, o)};  // create_graph
    Tensor gx = empty_like(x);
    const Tensor gg =
        g.to(x.dtype()).contiguous().reshape(o.reduction == kernels::LossReduction::kNone ? Shape{-1} : Shape{});
    if (x.numel() > 0) kernels::cross_entropy_backward_stub(x.device(), gx, x, t, stats, gg, total, o);
    return std::vector<Tensor>{gx};
  });
}

Tensor layer_norm(const Tensor& x_in, int64_t normalized_dims, const Tensor& weight, const Tensor& bias, double eps) {
  EMBER_OP_SITE("layer_norm");
  detail::check_defined("layer_norm", x_in);
  detail::check_same_device("layer_norm", {&x_in, &weight, &bias});
  EMBER_CHECK(is_floating(x_in.dtype()), "layer_norm: expects a floating tensor, got ", dtype_name(x_in.dtype()));
  EMBER_CHECK(normalized_dims >= 1 && normalized_dims <= x_in.dim(), "layer_norm: cannot normalize the last ",
              normalized_dims, " dims of ", shape_str(x_in.shape()));
  EMBER_CHECK(eps >= 0, "layer_norm: eps must be >= 0, got ", eps);
  const Shape norm_shape(x_in.shape().end() - normalized_dims, x_in.shape().end());
  int64_t cols = 1;
  for (int64_t s : norm_shape) cols *= s;
  for (const Tensor* p : {&weight, &bias})
    if (p->defined())
      EMBER_CHECK(p->shape() == norm_shape, "layer_norm: weight and bias must have the normalized shape ",
                  shape_str(norm_shape), ", got ", shape_str(p->shape()));
  EMBER_CHECK(x_in.numel() == 0 || cols > 0, "layer_norm: rows of 0 elements have no mean (input ",
              shape_str(x_in.shape()), ")");
  const int64_t rows = cols > 0 ? x_in.numel() / cols : 0;
  // The result's dtype is what the composed form promoted to (a bf16 input with float32
  // weights normalizes in float32).
  DType dtype = x_in.dtype();
  for (const Tensor* p : {&weight, &bias})
    if (p->defined()) dtype = promote_types(dtype, p->dtype());
  const Tensor x = x_in.to(dtype).contiguous().reshape({rows, cols});
  const Tensor w = weight.defined() ? weight.to(x.dtype()).contiguous().reshape({cols}) : Tensor();
  const Tensor b = bias.defined() ? bias.to(x.dtype()).contiguous().reshape({cols}) : Tensor();
  const DType stat = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
  Tensor y = empty_like(x), mean = empty({rows}, {stat, x.device()}), rstd = empty({rows}, {stat, x.device()});
  const Tensor wd = w.defined() ? w.detach() : Tensor(), bd = b.defined() ? b.detach() : Tensor();
  if (rows > 0) kernels::layer_norm_stub(x.device(), y, mean, rstd, x.detach(), wd, bd, eps);
  return autograd::record("layer_norm", {x, w, b}, y.view(x_in.shape()),
                          [x, w, mean, rstd, has_w = w.defined(), has_b = b.defined(), eps](const Tensor& g) {
    const Tensor dy = g.to(x.dtype()).contiguous().reshape(x.shape());
    if (grad_enabled()) {  // create_graph: the same gradients from differentiable ops
      const auto [xhat, r] = detail::normalize_composed(x, {1}, eps);
      return std::vector<Tensor>{detail::normalized_input_grad(has_w ? mul(dy, w) : dy, xhat, r, {1}),
                                 has_w ? sum(mul(dy, xhat), {0}) : Tensor(), has_b ? sum(dy, {0}) : Tensor()};
    }
    Tensor dx = autograd::needs_input_grad(0) ? empty_like(x) : Tensor();
    Tensor dw = has_w && autograd::needs_input_grad(1) ? empty({x.size(1)}, {x.dtype(), x.device()}) : Tensor();
    Tensor db = has_b && autograd::needs_input_grad(2) ? empty({x.size(1)}, {x.dtype(), x.device()}) : Tensor();
    if (x.size(0) > 0)
      kernels::layer_norm_backward_stub(x.device(), dx, dw, db, dy, x, mean, rstd, w);
    else
      for (Tensor* p : {&dw, &db})
        if (p->defined()) p->zero_();
    return std::vector<Tensor>{dx, dw, db};
  });
}

std::pair<Tensor, Tensor> batch_norm_stats(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                                           double momentum) {
  EMBER_OP_SITE("batch_norm_stats");
  detail::check_defined("batch_norm_stats", x);
  detail::check_same_device("batch_norm_stats", {&x, &running_mean, &running_var});
  EMBER_CHECK(x.dim() >= 2, "batch_norm_stats: expects [N, C, ...], got ", shape_str(x.shape()));
  EMBER_CHECK(is_floating(x.dtype()), "batch_norm_stats: expects a floating tensor, got ", dtype_name(x.dtype()));
  EMBER_CHECK(running_mean.defined() == running_var.defined(),
              "batch_norm_stats: running_mean and running_var go together");
  const int64_t N = x.size(0), C = x.size(1), hw = C > 0 && N > 0 ? x.numel() / (N * C) : 0;
  const DType stat = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
  for (const Tensor* r : {&running_mean, &running_var})
    if (r->defined())
      EMBER_CHECK(r->dim() == 1 && r->size(0) == C && r->dtype() == stat && r->is_contiguous(),
                  "batch_norm_stats: running statistics must be contiguous ", dtype_name(stat), " [", C, "], got ",
                  dtype_name(r->dtype()), " ", shape_str(r->shape()));
  EMBER_CHECK(!running_var.defined() || N * hw > 1, "batch_norm_stats: updating running_var needs more than one value ",
              "per channel, got input ", shape_str(x.shape()));
  Tensor mean = empty({C}, {stat, x.device()}), var = empty({C}, {stat, x.device()});
  if (C > 0)
    kernels::batch_norm_stats_stub(x.device(), mean, var, running_mean, running_var,
                                   x.detach().contiguous().reshape({N, C, hw}), momentum);
  return {mean, var};
}

// y = (x - mean) rstd * weight + bias with the batch's statistics; backward, per channel
// over N and the spatial dims: dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy * weight.
Tensor batch_norm_training(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                           const Tensor& running_var, double momentum, double eps) {
  EMBER_OP_SITE("batch_norm");
  const int64_t n = x.dim() >= 2 && x.size(1) > 0 ? x.numel() / x.size(1) : 0;
  EMBER_CHECK(n > 1, "batch_norm: training needs more than one value per channel, got input ", shape_str(x.shape()));
  auto [mean, var] = batch_norm_stats(x, running_mean, running_var, momentum);
  Shape bshape(static_cast<size_t>(x.dim()), 1);
  bshape[1] = x.size(1);
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  const Tensor rstd = rsqrt(add(var, Scalar(eps))).to(x.dtype()).reshape(bshape);
  Tensor y;
  Tensor xhat;
  {
    NoGradGuard no_grad;
    xhat = mul(sub(x, mean.to(x.dtype()).reshape(bshape)), rstd);
    y = weight.defined() ? mul(xhat, weight.reshape(bshape)) : xhat;
    if (bias.defined()) y = add(y, bias.reshape(bshape));
    // Without weight and bias y must not be xhat's own handle: the backward captures xhat
    // and y's grad_fn holds the backward, a cycle that leaked each step's graph (LSan).
    if (y.impl_ptr() == xhat.impl_ptr()) y = xhat.clone();
  }
  // Saves xhat (not x), so its formula is not differentiable in x: a second derivative
  // through batch_norm is an error naming it.
  return autograd::record_once_differentiable("batch_norm", {x, weight, bias}, y,
                          [xhat, rstd, w = weight.defined() ? weight.detach() : Tensor(), bshape, dims,
                           bias_dtype = bias.defined() ? bias.dtype() : x.dtype()](const Tensor& g) {
    // Gradients in their inputs' dtypes (a bf16 x with float32 weights under autocast).
    Tensor gx, gw, gb;
    if (autograd::needs_input_grad(1)) gw = sum(mul(g, xhat), dims).to(w.dtype());
    if (autograd::needs_input_grad(2)) gb = sum(g, dims).to(bias_dtype);
    if (autograd::needs_input_grad(0)) {
      const Tensor gg = w.defined() ? mul(g, w.reshape(bshape)) : g;
      gx = mul(rstd, sub(sub(gg, ember::mean(gg, dims, true)), mul(xhat, ember::mean(mul(gg, xhat), dims, true))))
               .to(xhat.dtype());
    }
    return std::vector<Tensor>{gx, gw, gb};
  });
}

namespace {

// grad_weight [rows, D] from grad_output [..., D] and checked int64 indices [n]; recorded
// as an op (linear in grad_output) whose gradient is the lookup of those rows.
Tensor dense_embedding_grad(const Tensor& grad_output, const Tensor& idx, int64_t rows,
                            std::optional<int64_t> padding_idx) {
  const int64_t D = grad_output.size(-1);
  Tensor gw = empty({rows, D}, {grad_output.dtype(), grad_output.device()});
  if (gw.numel() > 0)
    kernels::embedding_backward_stub(gw.device(), gw, grad_output.detach().contiguous().reshape({idx.numel(), D}),
                                     idx);
  if (padding_idx) gw.select(0, *padding_idx).zero_();  // its rows get no gradient
  return autograd::record("embedding_backward", {grad_output}, gw,
                          [idx, padding_idx, shape = grad_output.shape()](const Tensor& g) {
    Tensor rows_picked = index_select(g, 0, idx);
    if (padding_idx) rows_picked = mul(rows_picked, ne(idx, Scalar(*padding_idx)).to(g.dtype()).unsqueeze(1));
    return std::vector<Tensor>{rows_picked.reshape(shape)};
  });
}

// dropout's backward kernel as an op: the gradient times the saved mask over (1 - p),
// linear, so its own gradient is itself.
Tensor dropout_backward(const Tensor& grad, const Tensor& keep, double p) {
  const Tensor go = grad.detach().contiguous();
  Tensor gi = empty_like(go);
  if (go.numel() > 0) kernels::dropout_backward_stub(go.device(), gi, go, keep, p);
  return autograd::record("dropout_backward", {grad}, gi.view(grad.shape()),
                          [keep, p](const Tensor& g) { return std::vector<Tensor>{dropout_backward(g, keep, p)}; });
}

}  // namespace

Tensor embedding_backward(const Tensor& grad_output, const Tensor& indices, int64_t num_weights,
                          std::optional<int64_t> padding_idx) {
  EMBER_OP_SITE("embedding_backward");
  detail::check_defined("embedding_backward", grad_output, "grad_output");
  detail::check_defined("embedding_backward", indices, "indices");
  detail::check_same_device("embedding_backward", {&grad_output, &indices});
  EMBER_CHECK(grad_output.dim() == indices.dim() + 1 &&
                  Shape(grad_output.shape().begin(), grad_output.shape().end() - 1) == indices.shape(),
              "embedding_backward: grad_output ", shape_str(grad_output.shape()), " does not match indices ",
              shape_str(indices.shape()));
  EMBER_CHECK(is_floating(grad_output.dtype()), "embedding_backward: expects a floating gradient, got ",
              dtype_name(grad_output.dtype()));
  EMBER_CHECK(num_weights >= 0, "embedding_backward: num_weights must be >= 0, got ", num_weights);
  EMBER_CHECK(!padding_idx || (*padding_idx >= 0 && *padding_idx < num_weights), "embedding_backward: padding_idx ",
              padding_idx.value_or(0), " is out of range for ", num_weights, " rows");
  const Tensor idx = checked_indices(indices, num_weights, kernels::IndexCheck::kEmbeddingBackwardIndex).reshape({-1});
  return dense_embedding_grad(grad_output, idx, num_weights, padding_idx);
}

Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx) {
  EMBER_OP_SITE("embedding");
  detail::check_defined("embedding", weight, "weight");
  detail::check_defined("embedding", indices, "indices");
  EMBER_CHECK(is_floating(weight.dtype()) || !is_floating(indices.dtype()), "embedding: indices are ",
              dtype_name(indices.dtype()), " and weight is ", dtype_name(weight.dtype()),
              ": the order is embedding(indices, weight), as PyTorch's F.embedding(input, weight)");
  EMBER_CHECK(weight.dim() == 2, "embedding: weight must be [num_embeddings, dim], got ", shape_str(weight.shape()));
  const int64_t rows = weight.size(0);
  if (padding_idx) {
    EMBER_CHECK(*padding_idx >= -rows && *padding_idx < rows, "embedding: padding_idx ", *padding_idx,
                " is out of range for ", rows, " rows");
    if (*padding_idx < 0) *padding_idx += rows;
  }
  const Tensor idx = checked_indices(indices, rows, kernels::IndexCheck::kEmbeddingIndex);
  Shape out_shape = indices.shape();
  out_shape.push_back(weight.size(1));
  Tensor out = index_select(weight.detach(), 0, idx.reshape({-1})).view(out_shape);
  return autograd::record("embedding", {weight}, out, [idx, rows, padding_idx](const Tensor& g) {
    return std::vector<Tensor>{dense_embedding_grad(g, idx.reshape({-1}), rows, padding_idx)};
  });
}

Tensor dropout(const Tensor& x, double p, bool train, Generator* gen) {
  EMBER_OP_SITE("dropout");
  detail::check_defined("dropout", x);
  EMBER_CHECK(p >= 0 && p <= 1, "dropout: p must be in [0, 1], got ", p);
  EMBER_CHECK(is_floating(x.dtype()), "dropout: expects a floating tensor, got ", dtype_name(x.dtype()));
  if (!train || p == 0) return x;
  if (p == 1) return mul(x, Scalar(0.0));  // PyTorch's: zeros, NaN where x is NaN
  const Tensor in = x.detach().contiguous();
  // The Philox blocks rand(x.shape(), x.dtype()) would take, so masks are the same.
  const int64_t per_block = x.dtype() == kFloat64 ? 2 : 4;
  Generator& g = gen ? *gen : default_generator();
  const kernels::PhiloxState state{g.seed(), g.advance(static_cast<uint64_t>((in.numel() + per_block - 1) / per_block))};
  Tensor out = empty_like(in), keep = empty({in.numel()}, {kUInt8, in.device()});
  if (in.numel() > 0) kernels::dropout_stub(in.device(), out, keep, in, p, state);
  return autograd::record("dropout", {x}, out.view(x.shape()),
                          [keep, p](const Tensor& grad) { return std::vector<Tensor>{dropout_backward(grad, keep, p)}; });
}

}  // namespace ember
