// The graph autograd records (not a public header): nodes, their edges, the per-tensor
// autograd state, and record(), which ops call to attach their backward formula.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/meta.h"
#include "core/tensor.h"

namespace ember::autograd {

class Node;

// Where a node sends the gradient of one of its inputs.
struct Edge {
  std::shared_ptr<Node> node;  // null: that input needs no gradient
};

// One recorded op. apply() turns the gradient of its output into gradients of its
// inputs, one per edge (undefined where an input gets none).
class Node {
 public:
  Node() : scope(current_memory_scope()) {}
  virtual ~Node();
  virtual std::vector<Tensor> apply(const Tensor& grad_output) = 0;
  virtual const char* name() const = 0;
  // Drops saved tensors after a backward without retain_graph.
  virtual void release() {}

  std::vector<Edge> next;
  // The memory scope (core/meta.h) it was recorded in: its backward runs in it again, so
  // that memory estimates charge backward's allocations to the module that made the node.
  const void* scope;
};

// Gradients of the inputs, given the output's gradient. A formula may return gradients
// in the output's (broadcast) shape and the computation's dtype: the node reduces them
// to each input's shape and converts them to its dtype.
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;            // null for leaves
  std::weak_ptr<Node> grad_accumulator;     // leaves: the node that accumulates into grad
  std::vector<std::function<void(const Tensor&)>> post_accumulate_hooks;
};

// True when grad mode is on and one of the tensors requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);

// Attaches `backward` to `out` as the op `name` applied to `inputs`, when needs_grad.
// Returns `out` so ops can `return record(...)`.
Tensor record(const char* name, const std::vector<Tensor>& inputs, const Tensor& out, BackwardFn backward);

// Inside a backward formula: whether input i of the op being differentiated needs a
// gradient. A formula may leave the others undefined and skip their work (the MLP's
// first layer has no use for the gradient of its input, a quarter of its GEMM FLOPs).
// True outside a backward.
bool needs_input_grad(size_t i);

// g summed over the dims it was broadcast along, to `shape`.
Tensor sum_to(const Tensor& g, const Shape& shape);

}  // namespace ember::autograd
