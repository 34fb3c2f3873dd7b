// Mixed precision: bf16 (or fp16) compute with float32 master weights.
//
// Within an AutocastScope(kBFloat16), the ops that do most of the arithmetic and keep
// the largest activations -- matmul, linear, conv2d -- take their floating inputs
// converted to bf16 (parameters stay float32: the conversion is part of the graph, so
// their gradients arrive in float32) and give bf16 outputs. The ops after them follow
// their inputs' dtype, so the activations autograd saves take half the memory. Losses
// compute in float32 (cross_entropy and nll_loss convert 16-bit logits). The CPU backend
// does the arithmetic of 16-bit tensors in float32 and rounds the results.
#pragma once

#include <optional>

#include "core/dtype.h"

namespace ember {

class AutocastScope {
 public:
  explicit AutocastScope(DType dtype);  // kBFloat16 or kFloat16
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  std::optional<DType> previous_;
};

// The dtype autocast converts to on this thread, when a scope is open.
std::optional<DType> autocast_dtype();

}  // namespace ember
