// The normalizations' gradients composed from differentiable ops (not a public header):
// what layer_norm's and group_norm's backward run under create_graph, so that their
// gradients differentiate again (Note [Double backward] in core/autograd_graph.h), where
// their fused backward kernels run otherwise.
#pragma once

#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ember::detail {

// (x - mean) rstd over `dims` of x (kept as size-1 dims), and rstd.
std::pair<Tensor, Tensor> normalize_composed(const Tensor& x, const std::vector<int64_t>& dims, double eps);
// The gradient of a normalized input, given g = dy * weight: rstd (g - mean(g) - xhat
// mean(g xhat)) over `dims`.
Tensor normalized_input_grad(const Tensor& g, const Tensor& xhat, const Tensor& rstd, const std::vector<int64_t>& dims);

}  // namespace ember::detail
