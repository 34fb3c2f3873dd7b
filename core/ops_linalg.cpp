// matmul with torch.matmul's rules (1-D operands, batch broadcasting), folded onto the
// batched [B, M, K] @ [B, K, N] kernel. 16-bit floats compute in float32: converted
// here for the CPU, passed as they are to CUDA, whose GEMM reads them (gemm_compute_type).
#include "core/autograd.h"
#include "core/autograd_graph.h"
#include "core/dispatch.h"
#include "core/meta.h"
#include "core/op_utils.h"

namespace ember {
namespace {

// The dtype matmul and linear hand their kernel: 16-bit floats go to the CPU as float32,
// to CUDA as they are (its GEMMs read 16-bit operands and accumulate in float32).
DType gemm_compute_type(DType dtype, Device device) {
  const bool half = dtype == kFloat16 || dtype == kBFloat16;
  const bool cuda = device.is_cuda() || (device.is_meta() && meta_target() == DeviceType::CUDA);
  return half && !cuda ? kFloat32 : dtype;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  EMBER_OP_SITE("matmul");
  detail::check_defined("matmul", a, "first operand");
  detail::check_defined("matmul", b, "second operand");
  if (detail::autocast_changes({&a, &b})) return matmul(detail::autocast(a), detail::autocast(b));
  detail::check_same_device("matmul", {&a, &b});
  EMBER_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least one dim, got ",
              shape_str(a.shape()), " and ", shape_str(b.shape()));
  EMBER_CHECK(a.dtype() != kBool && b.dtype() != kBool, "matmul: bool tensors are not supported");
  const DType dtype = detail::result_type(a, b);
  const DType compute = gemm_compute_type(dtype, a.device());

  Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  const int64_t M = a2.size(-2), K = a2.size(-1), K2 = b2.size(-2), N = b2.size(-1);
  EMBER_CHECK(K == K2, "matmul: cannot multiply ", shape_str(a.shape()), " by ", shape_str(b.shape()), " (", K,
              " != ", K2, ")");
  Shape batch_a(a2.shape().begin(), a2.shape().end() - 2), batch_b(b2.shape().begin(), b2.shape().end() - 2);
  Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");

  Shape out_shape = batch;
  if (a.dim() > 1) out_shape.push_back(M);
  if (b.dim() > 1) out_shape.push_back(N);

  a2 = a2.to(compute);
  b2 = b2.to(compute);
  Tensor out3;
  if (batch_b.empty() && !batch_a.empty()) {
    // A batch of rows times one matrix is one big GEMM: [batch * M, K] @ [K, N].
    Tensor a3 = a2.reshape({1, shape_numel(batch_a) * M, K});
    out3 = empty({1, a3.size(1), N}, {compute, a.device()});
    kernels::matmul_stub(a.device(), out3, a3, b2.unsqueeze(0));
  } else {
    Shape full_a = batch, full_b = batch;
    full_a.insert(full_a.end(), {M, K});
    full_b.insert(full_b.end(), {K, N});
    const int64_t B = shape_numel(batch);
    Tensor a3 = a2.expand(full_a).reshape({B, M, K});
    Tensor b3 = b2.expand(full_b).reshape({B, K, N});
    out3 = empty({a3.size(0), M, N}, {compute, a.device()});
    kernels::matmul_stub(a.device(), out3, a3, b3);
  }
  Tensor out = out3.view(out_shape).to(dtype);
  // With 1-D operands promoted to matrices: dA = dC B^T, dB = A^T dC, each summed over
  // the batch dims it was broadcast along.
  // The operands are kept as they came, so the gradients are differentiable again.
  return autograd::record("matmul", {a, b}, out, [a, b](const Tensor& g) {
    Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
    Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
    Shape g_shape = g.shape();
    if (a.dim() == 1) g_shape.insert(g_shape.end() - (b.dim() > 1 ? 1 : 0), 1);
    if (b.dim() == 1) g_shape.push_back(1);
    Tensor g2 = g.reshape(g_shape);
    Tensor ga, gb;
    if (autograd::needs_input_grad(0))
      ga = autograd::sum_to(matmul(g2, b2.transpose(-1, -2)), a2.shape()).reshape(a.shape());
    if (autograd::needs_input_grad(1))
      gb = autograd::sum_to(matmul(a2.transpose(-1, -2), g2), b2.shape()).reshape(b.shape());
    return std::vector<Tensor>{ga, gb};
  });
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act) {
  EMBER_OP_SITE("linear");
  detail::check_defined("linear", x);
  detail::check_defined("linear", weight, "weight");
  detail::check_same_device("linear", {&x, &weight, &bias});
  if (detail::autocast_changes({&x, &weight, &bias}))
    return linear(detail::autocast(x), detail::autocast(weight), detail::autocast(bias), act);
  EMBER_CHECK(weight.dim() == 2, "linear: weight must be [out, in], got ", shape_str(weight.shape()));
  const int64_t out_f = weight.size(0), in_f = weight.size(1);
  EMBER_CHECK(x.dim() >= 1 && x.size(-1) == in_f, "linear: input ", shape_str(x.shape()), " does not end in ", in_f,
              " features (weight ", shape_str(weight.shape()), ")");
  if (bias.defined())
    EMBER_CHECK(bias.dim() == 1 && bias.size(0) == out_f, "linear: bias must be [", out_f, "], got ",
                shape_str(bias.shape()));
  DType dtype = promote_types(x.dtype(), weight.dtype());
  if (bias.defined()) dtype = promote_types(dtype, bias.dtype());
  EMBER_CHECK(is_floating(dtype), "linear: expects floating tensors, got ", dtype_name(dtype));
  const DType compute = gemm_compute_type(dtype, x.device());
  Tensor x2 = x.reshape({-1, in_f}).to(compute).contiguous();
  Tensor out = empty({x2.size(0), out_f}, {compute, x.device()});
  kernels::linear_stub(x.device(), out, x2, weight.to(compute).contiguous(),
                       bias.defined() ? bias.to(compute).contiguous() : Tensor(), act == Activation::kReLU);
  Shape out_shape(x.shape().begin(), x.shape().end() - 1);
  out_shape.push_back(out_f);
  Tensor y = out.view(out_shape).to(dtype);
  return autograd::record("linear", {x, weight, bias}, y,
                          [x, w = weight, has_bias = bias.defined(), in_f, out_f,
                           y = act == Activation::kReLU ? y.detach() : Tensor()](const Tensor& g_out) {
    const Tensor g = y.defined() ? detail::relu_backward(g_out, y) : g_out;
    Tensor g2 = g.reshape({-1, out_f});
    Tensor gx, gw, gb;
    if (autograd::needs_input_grad(0)) gx = matmul(g, w);                            // [..., in]
    if (autograd::needs_input_grad(1)) gw = matmul(g2.t(), x.reshape({-1, in_f}));  // [out, in]
    if (has_bias && autograd::needs_input_grad(2)) gb = sum(g2, {0});
    return std::vector<Tensor>{gx, gw, gb};
  });
}

}  // namespace ember
