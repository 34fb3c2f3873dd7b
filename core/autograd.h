// Autograd: define-by-run graphs of the ops applied to tensors that require grad.
//
// Every differentiable op records a Node holding its backward formula (written with
// ember's own ops, next to the op's forward) when grad mode is on and an input requires
// grad. Tensor::backward() walks the graph from the output without recursion, in
// dependency order, sums the gradients reaching each node, and accumulates leaf
// gradients into Tensor::grad(); autograd::grad() returns the gradients of chosen inputs
// instead, and with create_graph records the backward itself, so that a gradient can be
// differentiated again (a gradient penalty). See Tensor's autograd methods in
// core/tensor.h.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "core/tensor.h"

namespace ember {

// Whether ops record graphs on this thread (default: yes).
bool grad_enabled();

// Turns graph recording off for its scope (inference, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Turns graph recording on for its scope: inside a backward formula (where it is off) to
// run a forward again and differentiate it, as activation checkpointing does.
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

// Compares the analytic gradients of sum(fn(inputs) * w), for a fixed random w, with
// central finite differences in float64. The inputs must be float64 leaves that require
// grad. Throws ember::Error naming the input, element, and both values on a mismatch
// beyond atol + rtol * |numeric|; returns true otherwise.
bool gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
               double eps = 1e-6, double atol = 1e-5, double rtol = 1e-3);

// PyTorch's gradgradcheck: gradcheck of the first derivative, the function that maps
// (inputs, v) to autograd::grad(fn(inputs), inputs, v, create_graph = true), for a fixed
// random v of fn's output shape; so every second derivative of fn (and the dependence on
// v) is compared with central differences of analytic first derivatives, in float64.
// Same inputs and tolerances as gradcheck; an ember::Error names the failing input
// (input inputs.size() is v) and element.
bool gradgradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
                   double eps = 1e-6, double atol = 1e-5, double rtol = 1e-3);

namespace autograd {

// A differentiable function written by its caller (PyTorch's autograd.Function): `out`
// was computed from `inputs` (with graph recording off, or on inputs cut from the
// graph), and `backward` maps the gradient of `out` to one gradient per input
// (undefined where there is none). Returns `out` attached to the graph as one node named
// `name` when grad mode is on and an input requires grad; `out` itself otherwise. Under
// autograd::grad(..., create_graph = true) `backward` runs with recording on: its result
// differentiates again when it is written with ember's ops on tensors it captured as they
// came, not detached (Note [Double backward] in core/autograd_graph.h).
using BackwardFunction = std::function<std::vector<Tensor>(const Tensor& grad_output)>;
Tensor custom_function(const char* name, const std::vector<Tensor>& inputs, const Tensor& out,
                       BackwardFunction backward);

// torch.autograd.grad: the gradients of `outputs` with respect to `inputs`, one per input
// (each of the input's shape and dtype), returned rather than accumulated into grad(): no
// leaf's grad() changes and no post-accumulate hook fires. Only the part of the graph
// that leads to `inputs` runs, and inputs may be intermediate tensors.
//   grad_outputs: the gradient of each output (the vector-Jacobian product's vector);
//     empty, or an undefined entry, means 1 for a one-element output.
//   retain_graph: keep the graph's saved tensors for another backward (default:
//     create_graph); without it a second backward through the same nodes is an error.
//   create_graph: record the backward too, so the gradients require grad and can be
//     differentiated again (double backward; Note [Double backward] in
//     core/autograd_graph.h). An op whose backward has no derivative of its own (conv2d,
//     max_pool2d) is named by the error a second backward through it raises.
//   allow_unused: an input the outputs do not depend on gets an undefined tensor instead
//     of an error.
// Every output must require grad, every input too.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, std::optional<bool> retain_graph = std::nullopt,
                         bool create_graph = false, bool allow_unused = false);

}  // namespace autograd

}  // namespace ember
