// Tensor's in-place arithmetic: add_, sub_, mul_ and div_ (and so +=, -=, *=, /=), one
// pass through the binary ops' stubs into this tensor's memory, and the rule that keeps
// them out of autograd's way (Note [In-place arithmetic and autograd]).
#include "core/tensor.h"

#include "base/error.h"
#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/op_utils.h"
#include "core/ops.h"

namespace ember {

namespace {

// Note [In-place arithmetic and autograd]. add_, sub_, mul_ and div_ are not recorded by
// autograd: ember has no version counters to tell a backward that a tensor it saved was
// overwritten since. So with grad mode on they refuse any operand that requires grad,
// where a result would be silently wrong: writing into a tensor that requires grad (a leaf
// would lose its identity as a parameter, a graph output its history) and taking `other`
// that requires grad (its gradient would be dropped). The message says what to write
// instead, x = x + y, which is recorded. Under a NoGradGuard (parameter updates, running
// statistics) anything goes, as in PyTorch. What stays the user's care: overwriting a
// tensor that does not require grad but that a recorded op saved for its backward (y = x *
// w; x.mul_(2) changes w's gradient), which PyTorch's version counters would catch.

// self = self OP other: other (a tensor on self's device or a host scalar, Note [Scalar
// operands]) broadcast to self's shape and converted to self's dtype, in one pass.
const Tensor& binary_into(const kernels::OpStub<kernels::BinaryFn>& stub, const char* op, const char* spelled,
                          const Tensor& self, const Tensor& other, bool scalar = false) {
  detail::check_defined(op, self);
  detail::check_defined(op, other, "operand");
  EMBER_CHECK(other.device() == self.device() || scalar, op, ": the operand is on ", other.device().str(),
              " but this tensor on ", self.device().str());
  EMBER_CHECK(!(grad_enabled() && self.requires_grad()), op, ": cannot write in place into a tensor that requires grad "
              "(in-place ops are not recorded by autograd); write x = x ", spelled, " y instead, or use a NoGradGuard "
              "for parameter updates");
  EMBER_CHECK(!(grad_enabled() && other.requires_grad()), op, ": the operand requires grad, and an in-place op is not "
              "recorded by autograd (its gradient would be lost); write x = x ", spelled, " y instead");
  EMBER_CHECK(self.dtype() != kBool, op, ": bool tensors are not supported; convert them with to(kInt64) first");
  for (int64_t d = 0; d < self.dim(); ++d)
    EMBER_CHECK(self.stride(d) != 0 || self.size(d) == 1, op, ": this tensor ", shape_str(self.shape()),
                " is expanded (stride 0 along dim ", d, "), so one element would be written for several; "
                "write into a contiguous() copy");
  Tensor o = other.detach().to(self.dtype()).expand(self.shape());
  if (self.numel() == 0) return self;
  // An operand that shares memory with this tensor through another view (x[1:] += x[:-1])
  // would be read after part of it was written: it is copied first.
  if (o.shares_storage_with(self) && !(o.impl().offset == self.impl().offset && o.strides() == self.strides()))
    o = o.clone();
  // The elementwise kernels read each element before writing it, so the output may be
  // the first operand when both have one layout; other views take the two-pass route.
  if (self.is_contiguous()) {
    stub(self.device(), self, self, o);
  } else {
    Tensor out = empty(self.shape(), {self.dtype(), self.device()});
    stub(self.device(), out, self.detach(), o);
    self.copy_(out);
  }
  return self;
}

// The Scalar forms: the value as a host 0-d tensor of self's dtype.
Tensor host_scalar(const char* op, const Tensor& self, Scalar value) {
  detail::check_defined(op, self);
  return scalar_tensor(value, {self.dtype(), Device::cpu()});
}

// True division into an integer tensor has no integer result (PyTorch refuses it too).
void check_div_dtype(const Tensor& self) {
  EMBER_CHECK(!self.defined() || is_floating(self.dtype()), "div_: true division of a ", dtype_name(self.dtype()),
              " tensor in place would truncate; convert it first (x = x.to(kFloat32)) or write x = div(x, y)");
}

}  // namespace

const Tensor& Tensor::add_(const Tensor& other) const {
  return binary_into(kernels::add_stub, "add_", "+", *this, other);
}
const Tensor& Tensor::add_(Scalar other) const {
  return binary_into(kernels::add_stub, "add_", "+", *this, host_scalar("add_", *this, other), true);
}
const Tensor& Tensor::sub_(const Tensor& other) const {
  return binary_into(kernels::sub_stub, "sub_", "-", *this, other);
}
const Tensor& Tensor::sub_(Scalar other) const {
  return binary_into(kernels::sub_stub, "sub_", "-", *this, host_scalar("sub_", *this, other), true);
}
const Tensor& Tensor::mul_(const Tensor& other) const {
  return binary_into(kernels::mul_stub, "mul_", "*", *this, other);
}
const Tensor& Tensor::mul_(Scalar other) const {
  return binary_into(kernels::mul_stub, "mul_", "*", *this, host_scalar("mul_", *this, other), true);
}
const Tensor& Tensor::div_(const Tensor& other) const {
  check_div_dtype(*this);
  return binary_into(kernels::div_stub, "div_", "/", *this, other);
}
const Tensor& Tensor::div_(Scalar other) const {
  check_div_dtype(*this);
  return binary_into(kernels::div_stub, "div_", "/", *this, host_scalar("div_", *this, other), true);
}

}  // namespace ember
