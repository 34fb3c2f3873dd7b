// The graph autograd records (not a public header): nodes, their edges, the per-tensor
// autograd state, and record(), which ops call to attach their backward formula.
//
// Note [Double backward]. A formula is written with ember's ops, and under
// autograd::grad(..., create_graph = true) it runs with graph recording on, so the
// gradients it returns are themselves differentiable. For that the formula must reach
// the op's inputs and output through the graph: it captures its inputs as they came (not
// detached; a node may own its inputs, which are upstream of it), and its output through
// SavedOutput (a node cannot own its output, which owns the node). Where a formula calls
// a fused kernel, the kernel call is itself a recorded op with its own backward
// (relu_backward, dropout's and embedding's backward), or the formula composes the same
// gradient from differentiable ops when grad mode is on (cross entropy, layer norm, group
// norm, batch norm). An op whose backward has neither records with record_once_differentiable: a
// second derivative through it is then an error naming it.
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
class Node : public std::enable_shared_from_this<Node> {
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
// Returns `out` so ops can `return record(...)`. `out` must be a new tensor, none of
// `inputs` (a node that owned its output would never be freed).
Tensor record(const char* name, const std::vector<Tensor>& inputs, const Tensor& out, BackwardFn backward);
// As record, for an op whose backward runs kernels that have no derivative of their own
// (PyTorch's once_differentiable): under create_graph its gradients are computed with
// recording off and carry a node that raises an ember::Error naming the op if a second
// backward reaches it.
Tensor record_once_differentiable(const char* name, const std::vector<Tensor>& inputs, const Tensor& out,
                                  BackwardFn backward);

// An op's own output as its backward formula keeps it (PyTorch's SavedVariable of an
// output): the data only, and get() gives it back attached to the node again while a
// create_graph backward runs the node's formula, so that a second derivative flows
// through it (Note [Double backward]). Outside such a backward, get() is the plain data.
class SavedOutput {
 public:
  SavedOutput() = default;
  explicit SavedOutput(const Tensor& out) : data_(out.defined() ? out.detach() : Tensor()) {}
  Tensor get() const;

 private:
  Tensor data_;
};

// Inside a backward formula: whether input i of the op being differentiated needs a
// gradient. A formula may leave the others undefined and skip their work (the MLP's
// first layer has no use for the gradient of its input, a quarter of its GEMM FLOPs;
// autograd::grad asks only for what leads to its inputs). True outside a backward.
bool needs_input_grad(size_t i);

// g summed over the dims it was broadcast along, to `shape`.
Tensor sum_to(const Tensor& g, const Shape& shape);

// ----- shared by the graph (autograd.cpp) and the engine (autograd_engine.cpp) -----
namespace detail {

// The edge a gradient for `t` travels along: its grad_fn, or its leaf accumulator (made
// on first use); null when t does not require grad.
Edge edge_of(const Tensor& t);

// What the engine tells a formula while it runs: its node and that node's edges, and
// which nodes autograd::grad needs gradients at (null: every node, as backward()).
struct FormulaContext {
  Node* node = nullptr;
  const std::vector<Edge>* edges = nullptr;
  const std::function<bool(const Node*)>* needed = nullptr;
};
// Sets the context for its scope (restoring the outer one: backwards nest, as in
// activation checkpointing).
class FormulaScope {
 public:
  explicit FormulaScope(const FormulaContext& ctx);
  ~FormulaScope();
  FormulaScope(const FormulaScope&) = delete;
  FormulaScope& operator=(const FormulaScope&) = delete;

 private:
  FormulaContext outer_;
};

}  // namespace detail

}  // namespace ember::autograd
