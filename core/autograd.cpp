// The autograd engine: recording, the iterative backward walk, leaf accumulation,
// graph teardown without recursion, and gradcheck.
#include "core/autograd.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <utility>

#include "base/error.h"
#include "core/autograd_graph.h"
#include "core/ops.h"
#include "core/storage.h"
#include "memory/site.h"

namespace ember {
namespace autograd {
namespace {

thread_local bool tls_grad_enabled = true;

// Note [graph teardown]: a 10,000-op chain would destroy its nodes recursively (each
// node owns the next through its edges and saved tensors) and overflow the stack. Node
// and FunctionNode destructors hand what they own to this per-thread list instead, and
// the outermost destructor empties it in a loop.
struct Reaper {
  std::vector<std::shared_ptr<Node>> nodes;
  std::vector<BackwardFn> fns;
  bool draining = false;

  void drain() {
    if (draining) return;
    draining = true;
    while (!nodes.empty() || !fns.empty()) {
      if (!fns.empty()) {
        BackwardFn f = std::move(fns.back());
        fns.pop_back();
      } else {
        std::shared_ptr<Node> n = std::move(nodes.back());
        nodes.pop_back();
      }
    }
    draining = false;
  }
};
thread_local Reaper tls_reaper;

// The edges of the node whose formula is running on this thread (null outside one).
thread_local const std::vector<Edge>* tls_formula_edges = nullptr;
struct FormulaScope {
  const std::vector<Edge>* outer;
  explicit FormulaScope(const std::vector<Edge>* edges) : outer(std::exchange(tls_formula_edges, edges)) {}
  ~FormulaScope() { tls_formula_edges = outer; }
};

class FunctionNode final : public Node {
 public:
  FunctionNode(const char* name, BackwardFn fn, std::vector<Shape> shapes, std::vector<DType> dtypes)
      : name_(name), fn_(std::move(fn)), shapes_(std::move(shapes)), dtypes_(std::move(dtypes)) {}
  ~FunctionNode() override {
    if (fn_) tls_reaper.fns.push_back(std::move(fn_));
  }
  std::vector<Tensor> apply(const Tensor& g) override {
    EMBER_CHECK(fn_, "backward: the graph through '", name_,
                "' was already freed by an earlier backward; pass retain_graph=true to backward twice");
    std::vector<Tensor> grads;
    {
      FormulaScope scope(&next);
      grads = fn_(g);
    }
    EMBER_CHECK(grads.size() == next.size(), "backward: '", name_, "' returned ", grads.size(),
                " gradients for ", next.size(), " inputs");
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined() || !next[i].node) continue;
      if (grads[i].shape() != shapes_[i]) grads[i] = sum_to(grads[i], shapes_[i]);
      if (grads[i].dtype() != dtypes_[i]) grads[i] = grads[i].to(dtypes_[i]);
    }
    return grads;
  }
  const char* name() const override { return name_; }
  void release() override {
    if (fn_) tls_reaper.fns.push_back(std::move(fn_));
    fn_ = nullptr;
    tls_reaper.drain();
  }

 private:
  const char* name_;
  BackwardFn fn_;
  std::vector<Shape> shapes_;
  std::vector<DType> dtypes_;
};

// True when t is the only handle on its whole, contiguous buffer and has no autograd
// state: the engine's copy of a gradient a formula just made, which nobody else holds.
bool sole_owner(const Tensor& t) {
  const TensorImpl& impl = t.impl();
  return t.impl_ptr().use_count() == 1 && impl.storage.use_count() == 1 && !impl.autograd && t.is_contiguous() &&
         impl.offset == 0 && impl.storage->nbytes() == static_cast<size_t>(t.numel() * element_size(t.dtype()));
}

// Sums gradients into a leaf's grad() and then runs its hooks.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    AutogradMeta& meta = *leaf_->autograd;
    const bool own = sole_owner(g);  // asked before any copy of the handle
    Tensor gc = g.shape() == leaf_->shape ? g : sum_to(g, leaf_->shape);
    if (gc.dtype() != leaf_->dtype) gc = gc.to(leaf_->dtype);
    if (meta.grad.defined()) {
      // In place, as PyTorch: the gradient keeps its address from step to step, which a
      // captured CUDA graph and gradient buckets rely on.
      meta.grad.add_(gc);
    } else {
      meta.grad = gc.contiguous();
      // Never alias a tensor somebody else can see; a buffer only the engine holds is
      // kept instead of copied.
      if (!own && meta.grad.shares_storage_with(g)) meta.grad = meta.grad.clone();
    }
    Tensor leaf(leaf_);
    for (auto& hook : meta.post_accumulate_hooks) hook(leaf);
    return {};
  }
  const char* name() const override { return "AccumulateGrad"; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

AutogradMeta& meta_of(const Tensor& t) {
  auto& m = const_cast<TensorImpl&>(t.impl()).autograd;
  if (!m) m = std::make_shared<AutogradMeta>();
  return *m;
}

const AutogradMeta* find_meta(const Tensor& t) { return t.defined() ? t.impl().autograd.get() : nullptr; }

// The edge a gradient for `t` travels along: its grad_fn, or its leaf accumulator.
Edge edge_of(const Tensor& t) {
  const AutogradMeta* m = find_meta(t);
  if (!m || !m->requires_grad) return {};
  if (m->grad_fn) return {m->grad_fn};
  AutogradMeta& mm = meta_of(t);
  std::shared_ptr<Node> acc = mm.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    mm.grad_accumulator = acc;
  }
  return {acc};
}

}  // namespace

Node::~Node() {
  for (Edge& e : next)
    if (e.node) tls_reaper.nodes.push_back(std::move(e.node));
  next.clear();
  tls_reaper.drain();
}

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!tls_grad_enabled) return false;
  for (const Tensor* t : inputs) {
    const AutogradMeta* m = find_meta(*t);
    if (m && m->requires_grad) return true;
  }
  return false;
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!tls_grad_enabled) return false;
  for (const Tensor& t : inputs) {
    const AutogradMeta* m = find_meta(t);
    if (m && m->requires_grad) return true;
  }
  return false;
}

Tensor record(const char* name, const std::vector<Tensor>& inputs, const Tensor& out, BackwardFn backward) {
  if (!needs_grad(inputs)) return out;
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (const Tensor& t : inputs) {
    shapes.push_back(t.defined() ? t.shape() : Shape{});
    dtypes.push_back(t.defined() ? t.dtype() : kFloat32);
  }
  auto node = std::make_shared<FunctionNode>(name, std::move(backward), std::move(shapes), std::move(dtypes));
  for (const Tensor& t : inputs) node->next.push_back(edge_of(t));
  AutogradMeta& m = meta_of(out);
  m.requires_grad = true;
  m.grad_fn = std::move(node);
  return out;
}

bool needs_input_grad(size_t i) {
  return !tls_formula_edges || (i < tls_formula_edges->size() && (*tls_formula_edges)[i].node);
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  const int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  EMBER_CHECK(lead >= 0, "backward: cannot reduce a gradient of shape ", shape_str(g.shape()), " to ",
              shape_str(shape));
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < g.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && g.shape()[d] != 1)) dims.push_back(d);
  Tensor r = dims.empty() ? g : sum(g, dims, true);
  EMBER_CHECK(shape_numel(shape) == r.numel(), "backward: cannot reduce a gradient of shape ", shape_str(g.shape()),
              " to ", shape_str(shape));
  return r.reshape(shape);
}

}  // namespace autograd

using autograd::AutogradMeta;

bool grad_enabled() { return autograd::tls_grad_enabled; }
NoGradGuard::NoGradGuard() : previous_(autograd::tls_grad_enabled) { autograd::tls_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { autograd::tls_grad_enabled = previous_; }
EnableGradGuard::EnableGradGuard() : previous_(autograd::tls_grad_enabled) { autograd::tls_grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { autograd::tls_grad_enabled = previous_; }

Tensor custom_function(const char* name, const std::vector<Tensor>& inputs, const Tensor& out,
                       BackwardFunction backward) {
  return autograd::record(name, inputs, out.detach(), std::move(backward));
}

bool Tensor::requires_grad() const {
  const AutogradMeta* m = autograd::find_meta(*this);
  return m && m->requires_grad;
}

const Tensor& Tensor::set_requires_grad(bool on) const {
  AutogradMeta& m = autograd::meta_of(*this);
  EMBER_CHECK(!m.grad_fn, "set_requires_grad: only leaf tensors can be marked; this one was made by '",
              m.grad_fn->name(), "' (use detach() to make a leaf)");
  EMBER_CHECK(!on || is_floating(dtype()), "set_requires_grad: only floating tensors can require grad, not ",
              dtype_name(dtype()));
  m.requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const {
  const AutogradMeta* m = autograd::find_meta(*this);
  return !m || !m->grad_fn;
}

Tensor Tensor::grad() const {
  const AutogradMeta* m = autograd::find_meta(*this);
  return m ? m->grad : Tensor();
}

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined())
    EMBER_CHECK(g.shape() == shape(), "set_grad: gradient shape ", shape_str(g.shape()), " does not match ",
                shape_str(shape()));
  autograd::meta_of(*this).grad = g;
}

std::string Tensor::grad_fn_name() const {
  const AutogradMeta* m = autograd::find_meta(*this);
  return m && m->grad_fn ? m->grad_fn->name() : "";
}

void Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  EMBER_CHECK(is_leaf() && requires_grad(),
              "register_post_accumulate_grad_hook: only leaf tensors that require grad have accumulated gradients");
  autograd::meta_of(*this).post_accumulate_hooks.push_back(std::move(hook));
}

void Tensor::set_data(const Tensor& src) const {
  EMBER_CHECK(src.defined(), "set_data: the source tensor is undefined");
  TensorImpl& me = const_cast<TensorImpl&>(impl());
  me.storage = src.impl().storage;
  me.shape = src.shape();
  me.strides = src.strides();
  me.offset = src.offset();
  me.dtype = src.dtype();
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = this->impl().storage;
  impl->shape = shape();
  impl->strides = strides();
  impl->offset = offset();
  impl->dtype = dtype();
  return Tensor(std::move(impl));
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  using autograd::Node;
  EMBER_CHECK(requires_grad(), "backward: the tensor does not require grad (no input of the ops that made it did)");
  Tensor g = grad;
  if (!g.defined()) {
    EMBER_CHECK(numel() == 1, "backward: a gradient can only be implied for a one-element output, this one is ",
                shape_str(shape()), "; pass grad");
    g = ones_like(*this);
  }
  EMBER_CHECK(g.shape() == shape(), "backward: grad has shape ", shape_str(g.shape()), " but the output ",
              shape_str(shape()));
  NoGradGuard no_grad;
  std::shared_ptr<Node> root = autograd::edge_of(*this).node;

  // Dependencies: how many edges point at each node reachable from the root.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack{root.get()};
  deps[root.get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const auto& e : n->next) {
      if (!e.node) continue;
      if (deps[e.node.get()]++ == 0) stack.push_back(e.node.get());
    }
  }

  // Walk in dependency order; a node runs once every gradient reaching it has arrived.
  std::unordered_map<Node*, Tensor> pending;
  pending[root.get()] = g;
  std::vector<Node*> ready{root.get()};
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    auto it = pending.find(n);
    std::vector<Tensor> grads;
    if (it != pending.end()) {
      Tensor gn = std::move(it->second);
      pending.erase(it);
      const memory::SiteScope site(n->name(), /*backward=*/true);
      const MemoryScope scope(n->scope);
      grads = n->apply(gn);
      if (!retain_graph) n->release();
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
}

// ----- gradcheck -----

bool gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
               double eps, double atol, double rtol) {
  for (size_t i = 0; i < inputs.size(); ++i)
    EMBER_CHECK(inputs[i].dtype() == kFloat64 && inputs[i].is_leaf() && inputs[i].requires_grad(),
                "gradcheck: input ", i, " must be a float64 leaf that requires grad");
  Generator gen(12345);
  Tensor out = fn(inputs);
  Tensor w = randn(out.shape(), {kFloat64, out.device()}, &gen);
  for (const Tensor& t : inputs) t.set_grad({});
  sum(mul(out, w)).backward();

  NoGradGuard no_grad;
  auto objective = [&] { return sum(mul(fn(inputs), w)).item<double>(); };
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    Tensor analytic = x.grad().defined() ? x.grad().contiguous() : zeros_like(x);
    Tensor flat = x.contiguous();
    EMBER_CHECK(flat.shares_storage_with(x), "gradcheck: input ", i, " must be contiguous");
    // Each element is set through fill_, never through a host pointer: the input may be
    // on a device.
    const std::vector<double> values = flat.to_vector<double>();
    const std::vector<double> a = analytic.to_vector<double>();
    const Tensor elements = flat.view({-1});
    for (int64_t k = 0; k < x.numel(); ++k) {
      const double saved = values[static_cast<size_t>(k)];
      const Tensor element = elements.narrow(0, k, 1);
      element.fill_(saved + eps);
      const double up = objective();
      element.fill_(saved - eps);
      const double down = objective();
      element.fill_(saved);
      const double numeric = (up - down) / (2 * eps);
      EMBER_CHECK(std::fabs(numeric - a[k]) <= atol + rtol * std::fabs(numeric), "gradcheck: input ", i,
                  " element ", k, ": analytic ", a[k], " vs numeric ", numeric);
    }
  }
  return true;
}

}  // namespace ember
