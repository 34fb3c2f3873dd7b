// Reductions: dim handling (negative dims, duplicates, keepdim) and dispatch. mean and
// var are written with other ops (sum, sub, mul), so every backend has them for free.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/autograd_graph.h"
#include "core/dispatch.h"
#include "core/op_utils.h"

namespace ember {
namespace {

using kernels::DimMask;

DimMask make_mask(const Tensor& x, const std::vector<int64_t>& dims, const char* op) {
  EMBER_CHECK(x.dim() <= 64, op, ": tensors of more than 64 dims are not supported (got ", x.dim(), ")");
  if (dims.empty()) return x.dim() == 64 ? ~DimMask(0) : (DimMask(1) << x.dim()) - 1;
  DimMask mask = 0;
  for (int64_t d : dims) {
    int64_t nd = normalize_dim(d, x.dim(), op);
    EMBER_CHECK(!((mask >> nd) & 1), op, ": dim ", d, " appears more than once in the list of dims");
    mask |= DimMask(1) << nd;
  }
  return x.dim() == 0 ? 0 : mask;
}

Shape kept_shape(const Shape& s, DimMask mask) {
  Shape out = s;
  for (size_t d = 0; d < s.size(); ++d)
    if ((mask >> d) & 1) out[d] = 1;
  return out;
}

Tensor squeeze_reduced(const Tensor& t, DimMask mask, bool keepdim) {
  if (keepdim) return t;
  Shape shape;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (!((mask >> d) & 1)) shape.push_back(t.shape()[d]);
  return t.view(shape);
}

int64_t reduced_count(const Tensor& x, DimMask mask) {
  int64_t n = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if ((mask >> d) & 1) n *= x.shape()[d];
  return n;
}

Tensor reduce(const kernels::OpStub<kernels::ReduceFn>& stub, const Tensor& x, const std::vector<int64_t>& dims,
              bool keepdim, DType out_dtype, bool needs_elements) {
  EMBER_OP_SITE(stub.name());
  const char* op = stub.name();
  detail::check_defined(op, x);
  DimMask mask = make_mask(x, dims, op);
  if (needs_elements)
    EMBER_CHECK(reduced_count(x, mask) > 0, op, ": cannot reduce ",
                shape_str(x.shape()), " over dims with no elements (", op, " of nothing is undefined)");
  Tensor out = empty(kept_shape(x.shape(), mask), {out_dtype, x.device()});
  stub(x.device(), out, x, mask);
  return squeeze_reduced(out, mask, keepdim);
}

void check_floating(const char* op, const Tensor& x) {
  EMBER_CHECK(is_floating(x.dtype()), op, ": expects a floating tensor, got ", dtype_name(x.dtype()),
              " (convert with to(kFloat32))");
}

// max/min over one dim, with int64 indices.
std::pair<Tensor, Tensor> extremum_dim(const kernels::OpStub<kernels::ReduceIndexFn>& stub, const Tensor& x,
                                       int64_t dim, bool keepdim) {
  const char* op = stub.name() == std::string_view("max_dim") ? "max" : "min";
  detail::check_defined(op, x);
  if (x.dim() == 0) return {x.clone(), zeros({}, {kInt64, x.device()})};
  int64_t d = normalize_dim(dim, x.dim(), op);
  EMBER_CHECK(x.shape()[d] > 0, op, ": cannot reduce dim ", dim, " of ", shape_str(x.shape()),
              ": it has no elements");
  DimMask mask = DimMask(1) << d;
  Shape shape = kept_shape(x.shape(), mask);
  Tensor values = empty(shape, {x.dtype(), x.device()});
  Tensor indices = empty(shape, {kInt64, x.device()});
  if (values.numel() > 0) stub(x.device(), values, indices, x, d);
  Tensor v = squeeze_reduced(values, mask, keepdim);
  // The gradient goes to the element each index points at.
  autograd::record(op, {x}, v, [x_shape = x.shape(), shape, idx = indices, d](const Tensor& g) {
    return std::vector<Tensor>{scatter_add(zeros(x_shape, {g.dtype(), g.device()}), d, idx, g.reshape(shape))};
  });
  return {v, squeeze_reduced(indices, mask, keepdim)};
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  detail::check_defined("sum", x);
  Tensor out = reduce(kernels::sum_stub, x, dims, keepdim, is_floating(x.dtype()) ? x.dtype() : kInt64, false);
  const Shape shape = kept_shape(x.shape(), make_mask(x, dims, "sum"));
  return autograd::record("sum", {x}, out, [x_shape = x.shape(), shape](const Tensor& g) {
    return std::vector<Tensor>{g.reshape(shape).expand(x_shape)};
  });
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  EMBER_OP_SITE("mean");
  detail::check_defined("mean", x);
  check_floating("mean", x);
  int64_t n = reduced_count(x, make_mask(x, dims, "mean"));
  // n == 0 gives 0/0 = NaN, as in PyTorch.
  Tensor s = sum(x, dims, keepdim);
  return n == 0 ? full(s.shape(), std::numeric_limits<double>::quiet_NaN(), {x.dtype(), x.device()})
                : div(s, Scalar(static_cast<double>(n)));
}

// amax/amin share the gradient evenly among the elements equal to the extremum (PyTorch).
static Tensor extremum_backward_record(const char* op, const Tensor& x, const Tensor& out, const std::vector<int64_t>& dims) {
  const Shape shape = kept_shape(x.shape(), make_mask(x, dims, op));
  return autograd::record(op, {x}, out, [x = x.detach(), o = out.detach(), shape, dims](const Tensor& g) {
    Tensor hit = eq(x, o.reshape(shape));
    Tensor count = sum(hit.to(g.dtype()), dims, true);
    return std::vector<Tensor>{where(hit, div(g.reshape(shape), count), zeros({}, {g.dtype(), g.device()}))};
  });
}

Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  detail::check_defined("amax", x);
  return extremum_backward_record("amax", x, reduce(kernels::amax_stub, x, dims, keepdim, x.dtype(), true), dims);
}
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  detail::check_defined("amin", x);
  return extremum_backward_record("amin", x, reduce(kernels::amin_stub, x, dims, keepdim, x.dtype(), true), dims);
}

Tensor max(const Tensor& x) {
  EMBER_OP_SITE("max");
  detail::check_defined("max", x);
  EMBER_CHECK(x.numel() > 0, "max: the tensor has no elements");
  return amax(x);
}
Tensor min(const Tensor& x) {
  EMBER_OP_SITE("min");
  detail::check_defined("min", x);
  EMBER_CHECK(x.numel() > 0, "min: the tensor has no elements");
  return amin(x);
}

std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  EMBER_OP_SITE("max");
  return extremum_dim(kernels::max_dim_stub, x, dim, keepdim);
}
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  EMBER_OP_SITE("min");
  return extremum_dim(kernels::min_dim_stub, x, dim, keepdim);
}

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  EMBER_OP_SITE("argmax");
  detail::check_defined("argmax", x);
  if (!dim) {
    EMBER_CHECK(x.numel() > 0, "argmax: the tensor has no elements");
    Tensor idx = max(x.reshape({-1}), 0, false).second;
    return keepdim ? idx.view(Shape(x.dim(), 1)) : idx;
  }
  return max(x, *dim, keepdim).second;
}

Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  EMBER_OP_SITE("argmin");
  detail::check_defined("argmin", x);
  if (!dim) {
    EMBER_CHECK(x.numel() > 0, "argmin: the tensor has no elements");
    Tensor idx = min(x.reshape({-1}), 0, false).second;
    return keepdim ? idx.view(Shape(x.dim(), 1)) : idx;
  }
  return min(x, *dim, keepdim).second;
}

// Two passes (mean, then squared deviations), which stays accurate where the one-pass
// E[x^2] - E[x]^2 cancels catastrophically.
Tensor var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  EMBER_OP_SITE("var");
  detail::check_defined("var", x);
  check_floating("var", x);
  EMBER_CHECK(correction >= 0, "var: correction must be >= 0, got ", correction);
  const int64_t n = reduced_count(x, make_mask(x, dims, "var"));
  Tensor xc = x.dtype() == kFloat16 || x.dtype() == kBFloat16 ? x.to(kFloat32) : x;
  Tensor dev = sub(xc, mean(xc, dims, true));
  // PyTorch divides by max(n - correction, 0): inf, or NaN when the sum is 0 too.
  const double divisor = static_cast<double>(std::max<int64_t>(n - correction, 0));
  Tensor v = div(sum(mul(dev, dev), dims, keepdim), Scalar(divisor));
  return v.to(x.dtype());
}

// Note [Norm gradient]. The forward runs without recording, and the gradient is
// PyTorch's norm_backward written with differentiable ops: the composition's own chain
// rule would divide 0 by 0 where the norm (p = 2) or an element (p < 2) is zero, where
// PyTorch's gradient is 0.
Tensor norm(const Tensor& x, double p, const std::vector<int64_t>& dims, bool keepdim) {
  EMBER_OP_SITE("norm");
  detail::check_defined("norm", x);
  check_floating("norm", x);
  EMBER_CHECK(!std::isnan(p), "norm: p must not be NaN");
  const Shape shape = kept_shape(x.shape(), make_mask(x, dims, "norm"));
  constexpr double kInf = std::numeric_limits<double>::infinity();
  Tensor out;
  {
    NoGradGuard no_grad;
    if (p == 0) out = sum(ne(x, Scalar(0)), dims, keepdim).to(x.dtype());
    else if (p == 1) out = sum(abs(x), dims, keepdim);
    else if (p == 2) out = sqrt(sum(mul(x, x), dims, keepdim));
    else if (p == kInf) out = amax(abs(x), dims, keepdim);
    else if (p == -kInf) out = amin(abs(x), dims, keepdim);
    else out = pow(sum(pow(abs(x), Scalar(p)), dims, keepdim), Scalar(1 / p));
  }
  return autograd::record("norm", {x}, out, [x, p, dims, shape, o = autograd::SavedOutput(out)](const Tensor& g) {
    Tensor ge = g.reshape(shape), oe = o.get().reshape(shape);
    Tensor zero = zeros({}, {g.dtype(), g.device()});
    auto sign_times = [&](const Tensor& v) { return where(gt(x, Scalar(0)), v, where(lt(x, Scalar(0)), neg(v), zero)); };
    if (p == 0) return std::vector<Tensor>{mul(x, zero)};
    if (p == 1) return std::vector<Tensor>{sign_times(ge.expand(x.shape()))};
    // Where the norm is 0 every element is 0 and so is the gradient: divide by 1 there.
    Tensor safe = where(eq(oe, Scalar(0)), full({}, 1, {oe.dtype(), oe.device()}), oe);
    if (p == 2) return std::vector<Tensor>{mul(x, div(ge, safe))};
    if (std::isinf(p)) {  // shared evenly among the elements at the extremum, as amax
      Tensor hit = eq(abs(x), oe);
      Tensor count = sum(hit.to(g.dtype()), dims, true);
      return std::vector<Tensor>{where(hit, sign_times(div(ge, count).expand(x.shape())), zero)};
    }
    Tensor scaled = div(mul(pow(abs(x), Scalar(p - 1)), ge), pow(safe, Scalar(p - 1)));
    return std::vector<Tensor>{where(eq(x, Scalar(0)), zero, sign_times(scaled))};
  });
}

// all and any count the nonzero elements with sum (which takes bool): every backend has them.
static Tensor nonzero_mask(const char* op, const Tensor& x) {
  detail::check_defined(op, x);
  return x.dtype() == kBool ? x : ne(x, Scalar(0));
}
Tensor all(const Tensor& x) {
  Tensor nz = nonzero_mask("all", x);
  return eq(sum(nz), Scalar(nz.numel()));
}
Tensor all(const Tensor& x, int64_t dim, bool keepdim) {
  Tensor nz = nonzero_mask("all", x);
  const int64_t n = x.dim() == 0 ? 1 : x.size(normalize_dim(dim, x.dim(), "all"));
  return eq(sum(nz, {dim}, keepdim), Scalar(n));
}
Tensor any(const Tensor& x) { return gt(sum(nonzero_mask("any", x)), Scalar(0)); }
Tensor any(const Tensor& x, int64_t dim, bool keepdim) {
  return gt(sum(nonzero_mask("any", x), {dim}, keepdim), Scalar(0));
}

}  // namespace ember
