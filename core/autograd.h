// Autograd: define-by-run graphs of the ops applied to tensors that require grad.
//
// Every differentiable op records a Node holding its backward formula (written with
// ember's own ops, next to the op's forward) when grad mode is on and an input requires
// grad. Tensor::backward() walks the graph from the output without recursion, in
// dependency order, sums the gradients reaching each node, and accumulates leaf
// gradients into Tensor::grad(). See Tensor's autograd methods in core/tensor.h.
#pragma once

#include <functional>
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

// A differentiable function written by its caller (PyTorch's autograd.Function): `out`
// was computed from `inputs` (with graph recording off, or on inputs cut from the
// graph), and `backward` maps the gradient of `out` to one gradient per input
// (undefined where there is none). Returns `out` attached to the graph as one node named
// `name` when grad mode is on and an input requires grad; `out` itself otherwise.
using BackwardFunction = std::function<std::vector<Tensor>(const Tensor& grad_output)>;
Tensor custom_function(const char* name, const std::vector<Tensor>& inputs, const Tensor& out,
                       BackwardFunction backward);

// Compares the analytic gradients of sum(fn(inputs) * w), for a fixed random w, with
// central finite differences in float64. The inputs must be float64 leaves that require
// grad. Throws ember::Error naming the input, element, and both values on a mismatch
// beyond atol + rtol * |numeric|; returns true otherwise.
bool gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
               double eps = 1e-6, double atol = 1e-5, double rtol = 1e-3);

}  // namespace ember
