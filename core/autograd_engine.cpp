// The backward walk: Tensor::backward (gradients accumulate into the leaves' grad()) and
// autograd::grad (gradients returned for the inputs asked, nothing accumulated). Both
// walk the graph without recursion, in dependency order, and sum the gradients reaching a
// node before it runs; with create_graph the formulas run with recording on, so the
// gradients are differentiable again (Note [Double backward] in autograd_graph.h).
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "base/error.h"
#include "core/autograd.h"
#include "core/autograd_graph.h"
#include "core/ops.h"
#include "memory/site.h"

namespace ember {
namespace autograd {
namespace {

// For autograd::grad: the nodes from which one of `capture` is reachable through edges
// (they must run); none of the others does.
std::unordered_set<Node*> nodes_leading_to(const std::vector<Node*>& roots, const std::unordered_set<Node*>& capture) {
  std::unordered_map<Node*, bool> leads;  // settled or on the stack
  std::vector<std::pair<Node*, size_t>> stack;
  for (Node* r : roots)
    if (leads.emplace(r, false).second) stack.emplace_back(r, 0);
  while (!stack.empty()) {
    Node* n = stack.back().first;
    const size_t i = stack.back().second;
    if (i < n->next.size()) {
      ++stack.back().second;
      Node* c = n->next[i].node.get();
      if (c && leads.emplace(c, false).second) stack.emplace_back(c, 0);  // the graph is acyclic
      continue;
    }
    bool any = false;
    for (const Edge& e : n->next)
      if (e.node && (capture.count(e.node.get()) || leads[e.node.get()])) any = true;
    leads[n] = any;
    stack.pop_back();
  }
  std::unordered_set<Node*> out;
  for (const auto& [n, l] : leads)
    if (l) out.insert(n);
  return out;
}

// Runs the walk from `roots` with their gradients. capture null: every node that gets a
// gradient runs (backward); otherwise only those leading to a captured node run, and the
// gradient reaching each captured node is returned (grad).
std::unordered_map<Node*, Tensor> run_backward(const std::vector<std::shared_ptr<Node>>& roots,
                                               const std::vector<Tensor>& root_grads, bool retain_graph,
                                               bool create_graph, const std::unordered_set<Node*>* capture) {
  std::optional<NoGradGuard> off;
  std::optional<EnableGradGuard> on;
  if (create_graph)
    on.emplace();
  else
    off.emplace();

  // Dependencies: how many edges point at each node reachable from the roots.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> unique_roots, stack;
  for (const auto& r : roots)
    if (deps.emplace(r.get(), 0).second) unique_roots.push_back(r.get());
  stack = unique_roots;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const auto& e : n->next) {
      if (!e.node) continue;
      auto [it, fresh] = deps.emplace(e.node.get(), 0);
      if (it->second++ == 0 && fresh) stack.push_back(e.node.get());
    }
  }

  std::unordered_set<Node*> must_run;
  std::function<bool(const Node*)> needed;
  if (capture) {
    must_run = nodes_leading_to(unique_roots, *capture);
    needed = [&](const Node* n) {
      Node* m = const_cast<Node*>(n);
      return capture->count(m) > 0 || must_run.count(m) > 0;
    };
  }

  // Walk in dependency order; a node runs once every gradient reaching it has arrived.
  std::unordered_map<Node*, Tensor> pending, captured;
  for (size_t i = 0; i < roots.size(); ++i) {
    auto p = pending.find(roots[i].get());
    if (p == pending.end())
      pending.emplace(roots[i].get(), root_grads[i]);
    else
      p->second = add(p->second, root_grads[i]);
  }
  std::vector<Node*> ready;
  for (Node* r : unique_roots)
    if (deps[r] == 0) ready.push_back(r);
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    auto it = pending.find(n);
    std::vector<Tensor> grads;
    if (it != pending.end()) {
      Tensor gn = std::move(it->second);
      pending.erase(it);
      if (capture && capture->count(n)) captured[n] = gn;
      if (!capture || must_run.count(n)) {
        const memory::SiteScope site(n->name(), /*backward=*/true);
        const MemoryScope scope(n->scope);
        const detail::FormulaScope formula({n, &n->next, capture ? &needed : nullptr});
        grads = n->apply(gn);
        if (!retain_graph) n->release();
      }
    }
    for (size_t i = 0; i < n->next.size(); ++i) {
      Node* next = n->next[i].node.get();
      if (!next) continue;
      if (i < grads.size() && grads[i].defined()) {
        auto p = pending.find(next);
        if (p == pending.end())
          pending.emplace(next, std::move(grads[i]));  // the only reference, so a leaf may keep it
        else
          p->second = add(p->second, grads[i]);
      }
      if (--deps[next] == 0) ready.push_back(next);
    }
  }
  return captured;
}

// The gradient of `out` a walk starts from: `g`, or 1 for a one-element output.
Tensor root_grad(const char* op, const Tensor& out, const Tensor& g, const std::string& which) {
  if (!g.defined()) {
    EMBER_CHECK(out.numel() == 1, op, ": a gradient can only be implied for a one-element output; ", which, " is ",
                shape_str(out.shape()), "; pass its gradient");
    return ones_like(out);
  }
  EMBER_CHECK(g.shape() == out.shape(), op, ": the gradient of ", which, " has shape ", shape_str(g.shape()),
              " but ", which, " has shape ", shape_str(out.shape()));
  EMBER_CHECK(g.device() == out.device(), op, ": the gradient of ", which, " is on ", g.device().str(), " but ",
              which, " on ", out.device().str());
  return g;
}

}  // namespace

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, std::optional<bool> retain_graph, bool create_graph,
                         bool allow_unused) {
  EMBER_CHECK(!outputs.empty(), "grad: no outputs to differentiate");
  EMBER_CHECK(!inputs.empty(), "grad: no inputs to differentiate with respect to");
  EMBER_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "grad: ", grad_outputs.size(),
              " grad_outputs for ", outputs.size(), " outputs");
  std::vector<std::shared_ptr<Node>> roots;
  std::vector<Tensor> root_grads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    const std::string which = "output " + std::to_string(i);
    EMBER_CHECK(out.defined(), "grad: ", which, " is an undefined tensor");
    EMBER_CHECK(out.requires_grad(), "grad: ", which,
                " does not require grad (no input of the ops that made it did, or they ran without grad mode)");
    roots.push_back(detail::edge_of(out).node);
    root_grads.push_back(root_grad("grad", out, grad_outputs.empty() ? Tensor() : grad_outputs[i], which));
  }
  std::vector<Node*> at;
  std::unordered_set<Node*> capture;
  for (size_t i = 0; i < inputs.size(); ++i) {
    EMBER_CHECK(inputs[i].defined(), "grad: input ", i, " is an undefined tensor");
    EMBER_CHECK(inputs[i].requires_grad(), "grad: input ", i, " does not require grad, so it has no gradient");
    at.push_back(detail::edge_of(inputs[i]).node.get());
    capture.insert(at.back());
  }
  std::unordered_map<Node*, Tensor> captured =
      run_backward(roots, root_grads, retain_graph.value_or(create_graph), create_graph, &capture);
  std::vector<Tensor> result;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto it = captured.find(at[i]);
    EMBER_CHECK(it != captured.end() || allow_unused, "grad: input ", i, " ", shape_str(inputs[i].shape()),
                " was not used to compute the outputs; pass allow_unused=true to get an undefined gradient for it");
    result.push_back(it != captured.end() ? it->second : Tensor());
  }
  return result;
}

}  // namespace autograd

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  EMBER_CHECK(requires_grad(), "backward: the tensor does not require grad (no input of the ops that made it did)");
  const Tensor g = autograd::root_grad("backward", *this, grad, "the output");
  autograd::run_backward({autograd::detail::edge_of(*this).node}, {g}, retain_graph, false, nullptr);
}

}  // namespace ember
