// Argument checks and dtype rules shared by core's op files (not a public header).
#pragma once

#include <initializer_list>

#include "base/error.h"
#include "core/autocast.h"
#include "core/ops.h"
#include "memory/site.h"

namespace ember::detail {

// bool < integers < floats, the categories of PyTorch's type promotion.
inline int category(DType t) { return t == kBool ? 0 : (is_floating(t) ? 2 : 1); }

// PyTorch's result_type for two tensors: dimensioned operands decide, unless a 0-dim
// operand is of a higher category (then it decides).
inline DType result_type(const Tensor& a, const Tensor& b) {
  const bool za = a.dim() == 0, zb = b.dim() == 0;
  if (za == zb) return promote_types(a.dtype(), b.dtype());
  const Tensor& dimmed = za ? b : a;
  const Tensor& zero = za ? a : b;
  return category(zero.dtype()) > category(dimmed.dtype()) ? zero.dtype() : dimmed.dtype();
}

// A Scalar widens a tensor only across categories: int32 + 2 is int32, int32 + 2.5 is
// float32 (the default float dtype), float16 + 2.5 stays float16.
inline DType result_type(const Tensor& t, Scalar s) {
  const int cs = s.kind() == Scalar::Kind::Float ? 2 : (s.kind() == Scalar::Kind::Int ? 1 : 0);
  if (cs <= category(t.dtype())) return t.dtype();
  return cs == 2 ? kFloat32 : kInt64;
}

inline void check_same_device(const char* op, std::initializer_list<const Tensor*> ts) {
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    if (!first) {
      first = t;
      continue;
    }
    EMBER_CHECK(t->device() == first->device(), op, ": expected all tensors on one device, got ",
                first->device().str(), " and ", t->device().str());
  }
}

// Under an AutocastScope: `t` converted to the autocast dtype when it is a floating
// tensor of another dtype (the conversion is recorded, so gradients come back in t's
// dtype); `t` itself otherwise.
inline bool needs_autocast(const Tensor& t) {
  const std::optional<DType> d = autocast_dtype();
  return d && t.defined() && is_floating(t.dtype()) && t.dtype() != *d;
}
inline Tensor autocast(const Tensor& t) { return needs_autocast(t) ? t.to(*autocast_dtype()) : t; }
// Whether autocast would convert any of `ts`; it converts nothing itself.
inline bool autocast_changes(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (needs_autocast(*t)) return true;
  return false;
}

// grad * (out > 0): the gradient through a ReLU whose output is `out` (ops_elementwise.cpp).
Tensor relu_backward(const Tensor& grad, const Tensor& out);

inline void check_defined(const char* op, const Tensor& t, const char* what = "input") {
  EMBER_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
}

}  // namespace ember::detail
