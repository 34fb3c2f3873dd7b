// Neural-network ops: softmax / log_softmax, conv2d, conv_transpose2d and 2-D pooling (NCHW). Shapes and
// hyper-parameters are checked here with PyTorch's rules; 16-bit floats compute in f32.
#include "core/autograd_graph.h"
#include "core/dispatch.h"
#include "core/kernel_scratch.h"
#include "core/meta.h"
#include "core/op_utils.h"

namespace ember {
namespace {

// On the meta device: the scratch the target device's conv2d kernel would take, allocated
// and freed again where the kernel would run, so the meta allocator's peak includes it.
void meta_conv2d_scratch(kernels::ConvPass pass, const Tensor& in, const Tensor& weight, const Tensor& out, bool bias,
                         const kernels::Conv2dParams& p) {
  if (!in.device().is_meta()) return;
  const DeviceType target = meta_target();
  const std::vector<std::size_t> blocks =
      (target == DeviceType::CUDA ? kernels::cuda_conv2d_scratch : kernels::cpu_conv2d_scratch)(
          pass, in.shape(), weight.shape(), out.shape(), in.dtype(), bias, p);
  std::vector<Tensor> held;
  for (std::size_t b : blocks) held.push_back(empty({static_cast<int64_t>(b)}, {kUInt8, Device::meta()}));
}

Tensor softmax_impl(const kernels::OpStub<kernels::SoftmaxFn>& stub, const Tensor& x, int64_t dim) {
  EMBER_OP_SITE(stub.name());
  const char* op = stub.name();
  detail::check_defined(op, x);
  EMBER_CHECK(is_floating(x.dtype()), op, ": expects a floating tensor, got ", dtype_name(x.dtype()));
  Tensor in = (x.dim() == 0 ? x.reshape({1}) : x).contiguous();
  const int64_t d = normalize_dim(dim, in.dim(), op);
  Tensor out = empty_like(in);
  if (out.numel() > 0) stub(x.device(), out, in, d);
  out = x.dim() == 0 ? out.view({}) : out;
  const bool is_log = &stub == &kernels::log_softmax_stub;
  // softmax: y (g - sum(g y)); log_softmax: g - exp(y) sum(g), both over the dim.
  return autograd::record(op, {x}, out, [saved = autograd::SavedOutput(out), d, is_log](const Tensor& g) {
    const Tensor o = saved.get();
    Tensor gg = o.dim() == 0 ? g.reshape({1}) : g, oo = o.dim() == 0 ? o.reshape({1}) : o;
    Tensor r = is_log ? sub(gg, mul(exp(oo), sum(gg, {d}, true))) : mul(oo, sub(gg, sum(mul(gg, oo), {d}, true)));
    return std::vector<Tensor>{r.reshape(o.shape())};
  });
}

// floor((size + 2p - d(k - 1) - 1 + (ceil ? s - 1 : 0)) / s) + 1, where with ceil_mode
// the last window must start inside the input or its left padding.
int64_t pooled_size(int64_t size, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = size + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  int64_t out = (span >= 0 ? span / s : -((-span + s - 1) / s)) + 1;
  if (ceil_mode && out > 0 && (out - 1) * s >= size + p) --out;
  return out;
}

struct PoolSetup {
  Tensor in;  // 4-D, contiguous
  kernels::Pool2dParams params;
  Shape out_shape;
  bool batched;
};

PoolSetup pool_setup(const char* op, const Tensor& input, const Pool2dOptions& o, bool allow_dilation) {
  detail::check_defined(op, input);
  EMBER_CHECK(input.dim() == 3 || input.dim() == 4, op, ": expects a 3-D [C, H, W] or 4-D [N, C, H, W] input, got ",
              shape_str(input.shape()));
  EMBER_CHECK(is_floating(input.dtype()), op, ": expects a floating tensor, got ", dtype_name(input.dtype()));
  PoolSetup s;
  s.batched = input.dim() == 4;
  s.in = (s.batched ? input : input.unsqueeze(0)).contiguous();
  auto [kh, kw] = o.kernel_size;
  auto [sh, sw] = o.stride.value_or(o.kernel_size);
  auto [ph, pw] = o.padding;
  auto [dh, dw] = o.dilation;
  EMBER_CHECK(kh > 0 && kw > 0, op, ": kernel_size must be positive, got [", kh, ", ", kw, "]");
  EMBER_CHECK(sh > 0 && sw > 0, op, ": stride must be positive, got [", sh, ", ", sw, "]");
  EMBER_CHECK(dh > 0 && dw > 0, op, ": dilation must be positive, got [", dh, ", ", dw, "]");
  EMBER_CHECK(allow_dilation || (dh == 1 && dw == 1), op, ": dilation is not supported");
  EMBER_CHECK(ph >= 0 && pw >= 0 && ph <= kh / 2 && pw <= kw / 2, op, ": padding [", ph, ", ", pw,
              "] must be between 0 and half the kernel size [", kh, ", ", kw, "]");
  EMBER_CHECK(o.divisor_override >= 0, op, ": divisor_override must be positive, got ", o.divisor_override);
  const int64_t H = s.in.shape()[2], W = s.in.shape()[3];
  const int64_t OH = pooled_size(H, kh, sh, ph, dh, o.ceil_mode), OW = pooled_size(W, kw, sw, pw, dw, o.ceil_mode);
  EMBER_CHECK(OH > 0 && OW > 0, op, ": input ", shape_str(input.shape()), " is too small for kernel [", kh, ", ", kw,
              "] with padding [", ph, ", ", pw, "] and dilation [", dh, ", ", dw, "] (output would be [", OH, ", ",
              OW, "])");
  s.params = {{kh, kw}, {sh, sw}, {ph, pw}, {dh, dw}, o.ceil_mode, o.count_include_pad, o.divisor_override};
  s.out_shape = {s.in.shape()[0], s.in.shape()[1], OH, OW};
  return s;
}

// avg_pool2d and its backward kernel, each a recorded op whose gradient is the other:
// both are linear and each is the other's adjoint, so they differentiate any number of
// times. x, g: 4-D [N, C, H, W]; the result has shape `shape`.
Tensor avg_pool2d_backward_4d(const Tensor& g, const Shape& shape, const kernels::Pool2dParams& p);
Tensor avg_pool2d_4d(const Tensor& x, const Shape& shape, const kernels::Pool2dParams& p) {
  Tensor out = empty(shape, {x.dtype(), x.device()});
  if (out.numel() > 0) kernels::avg_pool2d_stub(x.device(), out, x.contiguous(), p);
  return autograd::record("avg_pool2d", {x}, out, [in_shape = x.shape(), p](const Tensor& g) {
    return std::vector<Tensor>{avg_pool2d_backward_4d(g, in_shape, p)};
  });
}
Tensor avg_pool2d_backward_4d(const Tensor& g, const Shape& shape, const kernels::Pool2dParams& p) {
  Tensor gi = empty(shape, {g.dtype(), g.device()});
  if (gi.numel() > 0) kernels::avg_pool2d_backward_stub(g.device(), gi, g.contiguous(), p);
  return autograd::record("avg_pool2d_backward", {g}, gi, [out_shape = g.shape(), p](const Tensor& gg) {
    return std::vector<Tensor>{avg_pool2d_4d(gg, out_shape, p)};
  });
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(kernels::softmax_stub, x, dim); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(kernels::log_softmax_stub, x, dim); }

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, std::pair<int64_t, int64_t> stride,
              std::pair<int64_t, int64_t> padding, std::pair<int64_t, int64_t> dilation, int64_t groups,
              Activation act) {
  EMBER_OP_SITE("conv2d");
  detail::check_defined("conv2d", input);
  detail::check_defined("conv2d", weight, "weight");
  detail::check_same_device("conv2d", {&input, &weight, &bias});
  if (detail::autocast_changes({&input, &weight, &bias}))
    return conv2d(detail::autocast(input), detail::autocast(weight), detail::autocast(bias), stride, padding, dilation,
                  groups, act);
  EMBER_CHECK(input.dim() == 3 || input.dim() == 4, "conv2d: expects a 3-D [C, H, W] or 4-D [N, C, H, W] input, got ",
              shape_str(input.shape()));
  EMBER_CHECK(weight.dim() == 4, "conv2d: weight must be 4-D [out, in / groups, kh, kw], got ", shape_str(weight.shape()));
  EMBER_CHECK(groups >= 1, "conv2d: groups must be >= 1, got ", groups);
  EMBER_CHECK(stride.first > 0 && stride.second > 0, "conv2d: stride must be positive, got [", stride.first, ", ",
              stride.second, "]");
  EMBER_CHECK(padding.first >= 0 && padding.second >= 0, "conv2d: padding must be >= 0, got [", padding.first, ", ",
              padding.second, "]");
  EMBER_CHECK(dilation.first > 0 && dilation.second > 0, "conv2d: dilation must be positive, got [", dilation.first,
              ", ", dilation.second, "]");
  const bool batched = input.dim() == 4;
  Tensor x = batched ? input : input.unsqueeze(0);
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t O = weight.shape()[0], kh = weight.shape()[2], kw = weight.shape()[3];
  EMBER_CHECK(O % groups == 0, "conv2d: ", O, " output channels are not divisible by groups ", groups);
  EMBER_CHECK(C == weight.shape()[1] * groups, "conv2d: input ", shape_str(input.shape()), " has ", C,
              " channels but weight ", shape_str(weight.shape()), " with groups ", groups, " expects ",
              weight.shape()[1] * groups);
  if (bias.defined())
    EMBER_CHECK(bias.dim() == 1 && bias.shape()[0] == O, "conv2d: bias must have shape [", O, "], got ",
                shape_str(bias.shape()));
  const int64_t OH = pooled_size(H, kh, stride.first, padding.first, dilation.first, false);
  const int64_t OW = pooled_size(W, kw, stride.second, padding.second, dilation.second, false);
  EMBER_CHECK(OH > 0 && OW > 0, "conv2d: input ", shape_str(input.shape()), " padded by [", padding.first, ", ",
              padding.second, "] is smaller than the dilated kernel of weight ", shape_str(weight.shape()));

  DType dtype = promote_types(x.dtype(), weight.dtype());
  if (bias.defined()) dtype = promote_types(dtype, bias.dtype());
  EMBER_CHECK(is_floating(dtype), "conv2d: expects floating tensors, got ", dtype_name(dtype));
  // 16-bit tensors go to the kernels as they are (they compute in float32 inside): no
  // float32 copy of the input or the output, which would undo bf16's memory savings.
  const DType compute = dtype;
  Tensor xc = x.to(compute).contiguous(), wc = weight.to(compute).contiguous();
  Tensor bc = bias.defined() ? bias.to(compute).contiguous() : Tensor();
  Tensor out = empty({N, O, OH, OW}, {compute, input.device()});
  kernels::Conv2dParams p{{stride.first, stride.second}, {padding.first, padding.second},
                          {dilation.first, dilation.second}, groups, act == Activation::kReLU};
  if (out.numel() > 0) {
    meta_conv2d_scratch(kernels::ConvPass::kForward, xc, wc, out, bc.defined(), p);
    kernels::conv2d_stub(input.device(), out, xc, wc, bc, p);
  }
  out = out.to(dtype);
  out = batched ? out : out.squeeze(0);
  // The input is saved as it came (a bf16 activation stays bf16) and converted again in
  // backward; for float32 that is the same tensor.
  // Its backward kernels have no derivative of their own: a second derivative through
  // conv2d is an error naming it (autograd_graph.h).
  return autograd::record_once_differentiable("conv2d", {input, weight, bias}, out,
                          [x = x.detach(), compute, wc = wc.detach(), has_bias = bias.defined(), p, batched,
                           y = p.relu ? out.detach() : Tensor()](const Tensor& g_out) {
    const Tensor xc = x.to(compute).contiguous();
    const Tensor g = y.defined() ? detail::relu_backward(g_out, y) : g_out;
    Tensor gy = (batched ? g : g.unsqueeze(0)).to(xc.dtype()).contiguous();
    Tensor gx, gw, gb;
    if (autograd::needs_input_grad(0)) {
      gx = empty_like(xc);
      meta_conv2d_scratch(kernels::ConvPass::kBackwardInput, gx, wc, gy, false, p);
      kernels::conv2d_backward_input_stub(xc.device(), gx, gy, wc, p);
      if (!batched) gx = gx.squeeze(0);
    }
    // The bias gradient comes with the weight's, from the same pass over gy (a frozen
    // weight with a trained bias pays for the weight gradient it drops).
    const bool bias_grad = has_bias && autograd::needs_input_grad(2);
    if (autograd::needs_input_grad(1) || bias_grad) {
      gw = empty_like(wc);
      if (bias_grad) gb = empty({wc.shape()[0]}, {wc.dtype(), wc.device()});
      meta_conv2d_scratch(kernels::ConvPass::kBackwardWeight, xc, gw, gy, gb.defined(), p);
      kernels::conv2d_backward_weight_stub(xc.device(), gw, gb, gy, xc, p);
      if (!autograd::needs_input_grad(1)) gw = Tensor();
    }
    return std::vector<Tensor>{gx, gw, gb};
  });
}

// conv_transpose2d is conv2d's adjoint in its input (Note in core/ops.h): the forward is
// conv2d's backward-input kernel with this op's input as conv's grad_output and its output
// as conv's grad_input; backward is conv2d forward (dx) and conv2d's weight gradient with
// the roles swapped (conv's input = dy, conv's grad_output = x).
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias,
                        std::pair<int64_t, int64_t> stride, std::pair<int64_t, int64_t> padding,
                        std::pair<int64_t, int64_t> output_padding, int64_t groups,
                        std::pair<int64_t, int64_t> dilation) {
  EMBER_OP_SITE("conv_transpose2d");
  detail::check_defined("conv_transpose2d", input);
  detail::check_defined("conv_transpose2d", weight, "weight");
  detail::check_same_device("conv_transpose2d", {&input, &weight, &bias});
  if (detail::autocast_changes({&input, &weight, &bias}))
    return conv_transpose2d(detail::autocast(input), detail::autocast(weight), detail::autocast(bias), stride, padding,
                            output_padding, groups, dilation);
  EMBER_CHECK(input.dim() == 3 || input.dim() == 4,
              "conv_transpose2d: expects a 3-D [C, H, W] or 4-D [N, C, H, W] input, got ", shape_str(input.shape()));
  EMBER_CHECK(weight.dim() == 4, "conv_transpose2d: weight must be 4-D [in, out / groups, kh, kw], got ",
              shape_str(weight.shape()));
  EMBER_CHECK(groups >= 1, "conv_transpose2d: groups must be >= 1, got ", groups);
  EMBER_CHECK(stride.first > 0 && stride.second > 0, "conv_transpose2d: stride must be positive, got [", stride.first,
              ", ", stride.second, "]");
  EMBER_CHECK(padding.first >= 0 && padding.second >= 0, "conv_transpose2d: padding must be >= 0, got [",
              padding.first, ", ", padding.second, "]");
  EMBER_CHECK(dilation.first > 0 && dilation.second > 0, "conv_transpose2d: dilation must be positive, got [",
              dilation.first, ", ", dilation.second, "]");
  const auto op_ok = [](int64_t op, int64_t s, int64_t d) { return op >= 0 && (op < s || op < d); };
  EMBER_CHECK(op_ok(output_padding.first, stride.first, dilation.first) &&
                  op_ok(output_padding.second, stride.second, dilation.second),
              "conv_transpose2d: output_padding [", output_padding.first, ", ", output_padding.second,
              "] must be >= 0 and smaller than either stride [", stride.first, ", ", stride.second,
              "] or dilation [", dilation.first, ", ", dilation.second, "]");
  const bool batched = input.dim() == 4;
  Tensor x = batched ? input : input.unsqueeze(0);
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t Og = weight.shape()[1], kh = weight.shape()[2], kw = weight.shape()[3], O = Og * groups;
  EMBER_CHECK(weight.shape()[0] % groups == 0, "conv_transpose2d: weight ", shape_str(weight.shape()), " has ",
              weight.shape()[0], " input channels, not divisible by groups ", groups);
  EMBER_CHECK(C == weight.shape()[0], "conv_transpose2d: input ", shape_str(input.shape()), " has ", C,
              " channels but weight ", shape_str(weight.shape()), " expects ", weight.shape()[0]);
  if (bias.defined())
    EMBER_CHECK(bias.dim() == 1 && bias.shape()[0] == O, "conv_transpose2d: bias must have shape [", O, "], got ",
                shape_str(bias.shape()));
  const int64_t OH = (H - 1) * stride.first - 2 * padding.first + dilation.first * (kh - 1) + output_padding.first + 1;
  const int64_t OW =
      (W - 1) * stride.second - 2 * padding.second + dilation.second * (kw - 1) + output_padding.second + 1;
  EMBER_CHECK(OH > 0 && OW > 0, "conv_transpose2d: input ", shape_str(input.shape()), " with weight ",
              shape_str(weight.shape()), ", stride [", stride.first, ", ", stride.second, "] and padding [",
              padding.first, ", ", padding.second, "] gives an empty output ", OH, " x ", OW);

  if (output_padding.first >= stride.first || output_padding.second >= stride.second) {
    // An output_padding of at least the stride (allowed below the dilation) makes the
    // output larger than any convolution maps back to the input's size, which the
    // backends' kernels (and cuDNN) require. The unpadded output, cut and extended with
    // zeros to the asked size, is the same: rows past it are reached by no input.
    Tensor y = conv_transpose2d(x, weight, {}, stride, {0, 0}, {0, 0}, groups, dilation);
    const auto rows = [](const Tensor& t, int64_t dim, int64_t start, int64_t len) {
      const int64_t from = std::min(start, t.size(dim));
      const Tensor kept = t.narrow(dim, from, std::min(len, t.size(dim) - from));
      if (kept.size(dim) == len) return kept;
      Shape zs = t.shape();
      zs[dim] = len - kept.size(dim);
      return cat({kept, zeros(zs, {t.dtype(), t.device()})}, dim);
    };
    y = rows(rows(y, 2, padding.first, OH), 3, padding.second, OW);
    if (bias.defined()) y = add(y, bias.view({1, O, 1, 1}));
    return batched ? y : y.squeeze(0);
  }
  DType dtype = promote_types(x.dtype(), weight.dtype());
  if (bias.defined()) dtype = promote_types(dtype, bias.dtype());
  EMBER_CHECK(is_floating(dtype), "conv_transpose2d: expects floating tensors, got ", dtype_name(dtype));
  Tensor xc = x.to(dtype).contiguous(), wc = weight.to(dtype).contiguous();
  Tensor out = empty({N, O, OH, OW}, {dtype, input.device()});
  kernels::Conv2dParams p{{stride.first, stride.second}, {padding.first, padding.second},
                          {dilation.first, dilation.second}, groups, false};
  if (out.numel() > 0) {
    meta_conv2d_scratch(kernels::ConvPass::kBackwardInput, out, wc, xc, false, p);
    kernels::conv2d_backward_input_stub(input.device(), out, xc, wc, p);
  }
  if (bias.defined()) out = add(out, bias.detach().to(dtype).view({1, O, 1, 1}));
  out = batched ? out : out.squeeze(0);
  return autograd::record_once_differentiable("conv_transpose2d", {input, weight, bias}, out,
                                              [xc = xc.detach(), wc = wc.detach(), p, batched](const Tensor& g_out) {
    const Tensor gy = (batched ? g_out : g_out.unsqueeze(0)).to(xc.dtype()).contiguous();
    Tensor gx, gw, gb;
    if (autograd::needs_input_grad(0)) {
      gx = empty_like(xc);
      meta_conv2d_scratch(kernels::ConvPass::kForward, gy, wc, gx, false, p);
      kernels::conv2d_stub(xc.device(), gx, gy, wc, Tensor(), p);
      if (!batched) gx = gx.squeeze(0);
    }
    if (autograd::needs_input_grad(1)) {
      gw = empty_like(wc);
      meta_conv2d_scratch(kernels::ConvPass::kBackwardWeight, gy, gw, xc, false, p);
      kernels::conv2d_backward_weight_stub(xc.device(), gw, Tensor(), xc, gy, p);
    }
    if (autograd::needs_input_grad(2)) gb = sum(gy, {0, 2, 3});
    return std::vector<Tensor>{gx, gw, gb};
  });
}

// The gradient of each output goes to the input element its index names.
// Note [Max-pool indices] (kernels/cpu/pool.cpp): the backward keeps a one-byte code per
// output unless the caller asked for PyTorch's int64 indices, and none without autograd.
std::pair<Tensor, Tensor> max_pool2d_impl(const Tensor& input, const Pool2dOptions& options, bool want_indices,
                                          Activation act) {
  EMBER_OP_SITE("max_pool2d");
  PoolSetup s = pool_setup("max_pool2d", input, options, true);
  s.params.relu = act == Activation::kReLU;
  Tensor out = empty(s.out_shape, {s.in.dtype(), s.in.device()});
  const bool grad = autograd::needs_grad({&input});
  const bool codes = !want_indices && s.params.kernel[0] * s.params.kernel[1] <= 256;
  Tensor idx = want_indices || grad ? empty(s.out_shape, {codes ? kUInt8 : kInt64, s.in.device()}) : Tensor();
  if (out.numel() > 0) kernels::max_pool2d_stub(s.in.device(), out, idx, s.in, s.params);
  Tensor o = s.batched ? out : out.squeeze(0);
  autograd::record_once_differentiable("max_pool2d", {input}, o,
                   [in_shape = s.in.shape(), idx, p = s.params, batched = s.batched,
                    y = s.params.relu ? o.detach() : Tensor()](const Tensor& g_out) {
    // With the ReLU: masked at the pooled size, before the gradient goes to the maxima.
    const Tensor g = y.defined() ? detail::relu_backward(g_out, y) : g_out;
    Tensor gi = empty(in_shape, {g.dtype(), g.device()});
    kernels::max_pool2d_backward_stub(g.device(), gi, (batched ? g : g.unsqueeze(0)).contiguous(), idx, p);
    return std::vector<Tensor>{batched ? gi : gi.squeeze(0)};
  });
  return {o, want_indices && !s.batched ? idx.squeeze(0) : idx};
}

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, const Pool2dOptions& options) {
  return max_pool2d_impl(input, options, true, Activation::kNone);
}

Tensor max_pool2d(const Tensor& input, const Pool2dOptions& options, Activation act) {
  return max_pool2d_impl(input, options, false, act).first;
}

Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options) {
  EMBER_OP_SITE("avg_pool2d");
  PoolSetup s = pool_setup("avg_pool2d", input, options, false);
  // s.in is input or a recorded view or copy of it, so the gradient reaches input.
  Tensor o = avg_pool2d_4d(s.in, s.out_shape, s.params);
  return s.batched ? o : o.squeeze(0);
}

}  // namespace ember
