// Vision ops of nn's image layers: pixel_shuffle / pixel_unshuffle (views and one copy),
// interpolate (nearest and bilinear resampling on the upsample2d kernels), dropout2d
// (whole channels), group_norm (its own kernels) and instance_norm (group norm with one
// channel per group, plus batch norm's running statistics). conv_transpose2d sits beside
// conv2d in core/ops_nn.cpp. PyTorch's argument rules; 16-bit inputs compute in float32.
#include <cmath>

#include "core/autograd.h"
#include "core/autograd_graph.h"
#include "core/dispatch.h"
#include "core/norm_composed.h"
#include "core/op_utils.h"

namespace ember {
namespace {

void check_image_dims(const char* op, const Tensor& x, const char* what) {
  EMBER_CHECK(x.dim() >= 3, op, ": expects ", what, ", got ", shape_str(x.shape()));
}

// Upsample2d's backward as an op: linear in the gradient, so its gradient is the forward.
Tensor upsample2d_backward(const Tensor& grad, const Shape& in_shape, const kernels::Upsample2dParams& p);

Tensor upsample2d(const Tensor& x, int64_t OH, int64_t OW, const kernels::Upsample2dParams& p) {
  const Tensor in = x.detach().contiguous();
  Tensor out = empty({in.size(0), in.size(1), OH, OW}, {in.dtype(), in.device()});
  if (out.numel() > 0) kernels::upsample2d_stub(in.device(), out, in, p);
  return autograd::record("upsample2d", {x}, out, [shape = x.shape(), p](const Tensor& g) {
    return std::vector<Tensor>{upsample2d_backward(g, shape, p)};
  });
}

Tensor upsample2d_backward(const Tensor& grad, const Shape& in_shape, const kernels::Upsample2dParams& p) {
  const Tensor go = grad.detach().contiguous();
  Tensor gi = empty(in_shape, {go.dtype(), go.device()});
  if (gi.numel() > 0) {
    if (go.numel() > 0)
      kernels::upsample2d_backward_stub(go.device(), gi, go, p);
    else
      gi.zero_();
  }
  return autograd::record("upsample2d_backward", {grad}, gi, [OH = grad.size(2), OW = grad.size(3), p](const Tensor& g) {
    return std::vector<Tensor>{upsample2d(g, OH, OW, p)};
  });
}

// PyTorch's per-dim scale (area_pixel_compute_scale) as torch 1.13's contiguous kernels
// use it: 1 / scale_factor when one is given, else in / out; bilinear keeps a dim whose
// size is unchanged as it is (whatever the factor said), nearest does not (a factor of
// 1.05 on 10 rows reads rows 0, 0, 1, 2, ...: floor(d / 1.05)).
// The scale is computed in float where PyTorch's is (nearest always, bilinear but for
// float64), so the kernels' float coordinates are PyTorch's to the bit.
double upsample_scale(int64_t in, int64_t out, std::optional<double> factor, const InterpolateOptions& o,
                      DType dtype) {
  const bool bilinear = o.mode == InterpolateMode::kBilinear;
  if (bilinear && dtype == kFloat64) {
    if (o.align_corners) return out > 1 ? double(in - 1) / double(out - 1) : 0.0;
    if (in == out) return 1.0;
    return factor ? 1.0 / *factor : double(in) / double(out);
  }
  if (bilinear && o.align_corners) return out > 1 ? float(in - 1) / float(out - 1) : 0.0f;
  if (bilinear && in == out) return 1.0;
  return factor ? float(1.0 / *factor) : float(in) / float(out);
}

}  // namespace

Tensor pixel_shuffle(const Tensor& x, int64_t r) {
  EMBER_OP_SITE("pixel_shuffle");
  detail::check_defined("pixel_shuffle", x);
  check_image_dims("pixel_shuffle", x, "an input of at least 3 dims [*, C r^2, H, W]");
  EMBER_CHECK(r > 0, "pixel_shuffle: upscale_factor must be positive, got ", r);
  const int64_t d = x.dim(), C = x.size(d - 3), H = x.size(d - 2), W = x.size(d - 1);
  EMBER_CHECK(C % (r * r) == 0, "pixel_shuffle: the ", C, " channels of ", shape_str(x.shape()),
              " are not divisible by upscale_factor^2 = ", r * r);
  const Shape batch(x.shape().begin(), x.shape().end() - 3);
  int64_t B = 1;
  for (int64_t s : batch) B *= s;
  const int64_t oc = C / (r * r);
  // [B, oc, r, r, H, W] -> [B, oc, H, r, W, r]
  Tensor y = x.reshape({B, oc, r, r, H, W}).permute({0, 1, 4, 2, 5, 3}).contiguous();
  Shape out = batch;
  for (int64_t s : {oc, H * r, W * r}) out.push_back(s);
  return y.view(out);
}

Tensor pixel_unshuffle(const Tensor& x, int64_t r) {
  EMBER_OP_SITE("pixel_unshuffle");
  detail::check_defined("pixel_unshuffle", x);
  check_image_dims("pixel_unshuffle", x, "an input of at least 3 dims [*, C, H r, W r]");
  EMBER_CHECK(r > 0, "pixel_unshuffle: downscale_factor must be positive, got ", r);
  const int64_t d = x.dim(), C = x.size(d - 3), H = x.size(d - 2), W = x.size(d - 1);
  EMBER_CHECK(H % r == 0 && W % r == 0, "pixel_unshuffle: height ", H, " and width ", W, " of ",
              shape_str(x.shape()), " must be divisible by downscale_factor ", r);
  const Shape batch(x.shape().begin(), x.shape().end() - 3);
  int64_t B = 1;
  for (int64_t s : batch) B *= s;
  const int64_t oh = H / r, ow = W / r;
  // [B, C, oh, r, ow, r] -> [B, C, r, r, oh, ow]
  Tensor y = x.reshape({B, C, oh, r, ow, r}).permute({0, 1, 3, 5, 2, 4}).contiguous();
  Shape out = batch;
  for (int64_t s : {C * r * r, oh, ow}) out.push_back(s);
  return y.view(out);
}

Tensor interpolate(const Tensor& x, const InterpolateOptions& o) {
  EMBER_OP_SITE("interpolate");
  detail::check_defined("interpolate", x);
  EMBER_CHECK(x.dim() == 4, "interpolate: expects a 4-D [N, C, H, W] input, got ", shape_str(x.shape()));
  EMBER_CHECK(is_floating(x.dtype()), "interpolate: expects a floating tensor, got ", dtype_name(x.dtype()));
  EMBER_CHECK(o.size.has_value() != o.scale_factor.has_value(),
              "interpolate: give exactly one of size and scale_factor");
  EMBER_CHECK(!o.align_corners || o.mode == InterpolateMode::kBilinear,
              "interpolate: align_corners applies to bilinear mode only");
  const int64_t H = x.size(2), W = x.size(3);
  EMBER_CHECK(H > 0 && W > 0, "interpolate: input ", shape_str(x.shape()), " has an empty plane");
  int64_t OH, OW;
  if (o.size) {
    OH = o.size->first, OW = o.size->second;
  } else {
    const auto [fh, fw] = *o.scale_factor;
    EMBER_CHECK(fh > 0 && fw > 0 && std::isfinite(fh) && std::isfinite(fw),
                "interpolate: scale_factor must be positive, got [", fh, ", ", fw, "]");
    OH = static_cast<int64_t>(std::floor(double(H) * fh));
    OW = static_cast<int64_t>(std::floor(double(W) * fw));
  }
  EMBER_CHECK(OH > 0 && OW > 0, "interpolate: output size ", OH, " x ", OW, " of input ", shape_str(x.shape()),
              " must be positive");
  const std::optional<double> fh = o.scale_factor ? std::optional(o.scale_factor->first) : std::nullopt;
  const std::optional<double> fw = o.scale_factor ? std::optional(o.scale_factor->second) : std::nullopt;
  const kernels::Upsample2dParams p{o.mode == InterpolateMode::kBilinear, o.align_corners,
                                    upsample_scale(H, OH, fh, o, x.dtype()),
                                    upsample_scale(W, OW, fw, o, x.dtype())};
  return upsample2d(x, OH, OW, p);
}

Tensor dropout2d(const Tensor& x, double p, bool train, Generator* gen) {
  EMBER_OP_SITE("dropout2d");
  detail::check_defined("dropout2d", x);
  EMBER_CHECK(p >= 0 && p <= 1, "dropout2d: p must be in [0, 1], got ", p);
  EMBER_CHECK(is_floating(x.dtype()), "dropout2d: expects a floating tensor, got ", dtype_name(x.dtype()));
  EMBER_CHECK(x.dim() >= 2, "dropout2d: expects [N, C, *] or [C, *] channels, got ", shape_str(x.shape()));
  if (!train || p == 0) return x;
  if (p == 1) return mul(x, Scalar(0.0));
  // PyTorch's feature dropout: one draw per (n, c) of the first two dims (a 3-D input is
  // [N, C, L], as torch 1.13 reads it), broadcast over the rest.
  Shape mask_shape{x.size(0), x.size(1)};
  for (int64_t d = 2; d < x.dim(); ++d) mask_shape.push_back(1);
  const Tensor keep = ge(rand(mask_shape, {x.dtype(), x.device()}, gen), Scalar(p)).to(x.dtype());
  return mul(x, mul(keep, Scalar(1.0 / (1.0 - p))));
}

Tensor group_norm(const Tensor& x_in, int64_t G, const Tensor& weight, const Tensor& bias, double eps) {
  EMBER_OP_SITE("group_norm");
  detail::check_defined("group_norm", x_in);
  detail::check_same_device("group_norm", {&x_in, &weight, &bias});
  EMBER_CHECK(is_floating(x_in.dtype()), "group_norm: expects a floating tensor, got ", dtype_name(x_in.dtype()));
  EMBER_CHECK(x_in.dim() >= 2, "group_norm: expects [N, C, *], got ", shape_str(x_in.shape()));
  const int64_t N = x_in.size(0), C = x_in.size(1);
  EMBER_CHECK(G > 0 && C % G == 0, "group_norm: ", C, " channels of ", shape_str(x_in.shape()),
              " are not divisible into num_groups ", G);
  EMBER_CHECK(eps >= 0, "group_norm: eps must be >= 0, got ", eps);
  for (const Tensor* t : {&weight, &bias})
    if (t->defined())
      EMBER_CHECK(t->dim() == 1 && t->size(0) == C, "group_norm: weight and bias must be [", C, "], got ",
                  shape_str(t->shape()));
  const int64_t S = C > 0 ? x_in.numel() / std::max<int64_t>(N * C, 1) : 0;
  EMBER_CHECK(x_in.numel() == 0 || S > 0, "group_norm: empty groups in ", shape_str(x_in.shape()));
  DType dtype = x_in.dtype();
  for (const Tensor* p : {&weight, &bias})
    if (p->defined()) dtype = promote_types(dtype, p->dtype());
  const Tensor x = x_in.to(dtype).contiguous().reshape({N, C, S});
  const Tensor w = weight.defined() ? weight.to(dtype).contiguous() : Tensor();
  const Tensor b = bias.defined() ? bias.to(dtype).contiguous() : Tensor();
  const DType stat = dtype == kFloat64 ? kFloat64 : kFloat32;
  Tensor y = empty_like(x), mean = empty({N, G}, {stat, x.device()}), rstd = empty({N, G}, {stat, x.device()});
  const Tensor wd = w.defined() ? w.detach() : Tensor(), bd = b.defined() ? b.detach() : Tensor();
  if (x.numel() > 0) kernels::group_norm_stub(x.device(), y, mean, rstd, x.detach(), wd, bd, G, eps);
  return autograd::record("group_norm", {x, w, b}, y.view(x_in.shape()),
                          [x, w, wd, mean, rstd, G, eps, has_w = w.defined(), has_b = b.defined()](const Tensor& g) {
    const Tensor dy = g.to(x.dtype()).contiguous().reshape(x.shape());
    const int64_t N = x.size(0), C = x.size(1), S = x.size(2);
    if (grad_enabled() && x.numel() > 0) {  // create_graph: the same gradients composed, over [N, G, C / G * S]
      const auto [xhat_g, r] = detail::normalize_composed(x.reshape({N, G, -1}), {2}, eps);
      const Tensor xhat = xhat_g.reshape({N, C, S});
      const Tensor dxhat = has_w ? mul(dy, w.view({1, C, 1})) : dy;
      return std::vector<Tensor>{
          detail::normalized_input_grad(dxhat.reshape({N, G, -1}), xhat_g, r, {2}).reshape({N, C, S}),
          has_w ? sum(mul(dy, xhat), {0, 2}) : Tensor(), has_b ? sum(dy, {0, 2}) : Tensor()};
    }
    const Tensor xd = x.detach();
    const TensorOptions opt{x.dtype(), x.device()};
    Tensor dx = autograd::needs_input_grad(0) ? empty_like(xd) : Tensor();
    Tensor dw = has_w && autograd::needs_input_grad(1) ? empty({C}, opt) : Tensor();
    Tensor db = has_b && autograd::needs_input_grad(2) ? empty({C}, opt) : Tensor();
    if (x.numel() > 0)
      kernels::group_norm_backward_stub(x.device(), dx, dw, db, dy, xd, mean, rstd, wd, G);
    else
      for (Tensor* p : {&dw, &db})
        if (p->defined()) p->zero_();
    return std::vector<Tensor>{dx, dw, db};
  });
}

Tensor instance_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                     const Tensor& bias, bool use_input_stats, double momentum, double eps) {
  EMBER_OP_SITE("instance_norm");
  detail::check_defined("instance_norm", x);
  detail::check_same_device("instance_norm", {&x, &running_mean, &running_var, &weight, &bias});
  EMBER_CHECK(x.dim() >= 3, "instance_norm: expects [N, C, *] with spatial dims, got ", shape_str(x.shape()));
  const int64_t N = x.size(0), C = x.size(1);
  EMBER_CHECK(running_mean.defined() == running_var.defined(),
              "instance_norm: give both running_mean and running_var, or neither");
  for (const Tensor* t : {&running_mean, &running_var, &weight, &bias})
    if (t->defined())
      EMBER_CHECK(t->dim() == 1 && t->size(0) == C, "instance_norm: running stats, weight and bias must be [", C,
                  "], got ", shape_str(t->shape()));
  const int64_t S = x.numel() / std::max<int64_t>(N * C, 1);
  if (!use_input_stats) {
    EMBER_CHECK(running_mean.defined(), "instance_norm: use_input_stats = false needs running_mean and running_var");
    Shape bshape(x.dim(), 1);
    bshape[1] = C;
    Tensor y = mul(sub(x, running_mean.view(bshape)), rsqrt(add(running_var.view(bshape), Scalar(eps))));
    if (weight.defined()) y = mul(y, weight.view(bshape));
    if (bias.defined()) y = add(y, bias.view(bshape));
    return y;
  }
  EMBER_CHECK(S > 1 || x.numel() == 0, "instance_norm: expected more than 1 spatial element per channel, got input ",
              shape_str(x.shape()));
  if (running_mean.defined()) {
    // PyTorch's: batch norm over [1, N C, *] with the running stats repeated N times, then
    // averaged back: each instance's mean and unbiased variance, averaged over the batch.
    const NoGradGuard no_grad;
    const Tensor xs = x.detach().reshape({N, C, S}).to(running_mean.dtype());
    const Tensor m = mean(mean(xs, {2}), {0}), v = mean(var(xs, {2}, 1), {0});
    running_mean.copy_(add(mul(running_mean, Scalar(1 - momentum)), mul(m, Scalar(momentum))));
    running_var.copy_(add(mul(running_var, Scalar(1 - momentum)), mul(v, Scalar(momentum))));
  }
  return group_norm(x, C, weight, bias, eps);
}

}  // namespace ember
