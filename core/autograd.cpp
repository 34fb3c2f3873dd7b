// The autograd graph: recording (record, record_once_differentiable, SavedOutput), the
// nodes (a formula, a leaf's accumulator, the error a once-differentiable op leaves for a
// second derivative), per-tensor autograd state, and graph teardown without recursion.
// The backward walk is in autograd_engine.cpp, gradcheck in gradcheck.cpp.
#include "core/autograd.h"

#include <algorithm>
#include <utility>

#include "base/error.h"
#include "core/autograd_graph.h"
#include "core/ops.h"
#include "core/storage.h"

namespace ember {
namespace autograd {
namespace {

thread_local bool tls_grad_enabled = true;
thread_local detail::FormulaContext tls_formula;

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

AutogradMeta& meta_of(const Tensor& t) {
  auto& m = const_cast<TensorImpl&>(t.impl()).autograd;
  if (!m) m = std::make_shared<AutogradMeta>();
  return *m;
}

const AutogradMeta* find_meta(const Tensor& t) { return t.defined() ? t.impl().autograd.get() : nullptr; }

// `data` (detached) as the output of `node`: a new handle on the same storage.
Tensor attach(const Tensor& data, std::shared_ptr<Node> node) {
  Tensor t = data.detach();
  AutogradMeta& m = meta_of(t);
  m.requires_grad = true;
  m.grad_fn = std::move(node);
  return t;
}

// Stands for the gradient a once-differentiable op computed under create_graph: its edges
// are the incoming gradient's and the op's inputs' (what that gradient depends on), and
// reaching it in a backward is the error PyTorch's once_differentiable raises.
class DelayedError final : public Node {
 public:
  explicit DelayedError(const char* op) : op_(op) {}
  std::vector<Tensor> apply(const Tensor&) override {
    EMBER_FAIL("backward: '", op_, "' is not differentiable twice (its backward runs kernels with no derivative ",
               "of their own), so the gradient autograd::grad(..., create_graph=true) computed through it cannot ",
               "be differentiated again");
  }
  const char* name() const override { return "DelayedError"; }

 private:
  const char* op_;
};

class FunctionNode final : public Node {
 public:
  FunctionNode(const char* name, BackwardFn fn, std::vector<Shape> shapes, std::vector<DType> dtypes, bool once)
      : name_(name), fn_(std::move(fn)), shapes_(std::move(shapes)), dtypes_(std::move(dtypes)), once_(once) {}
  ~FunctionNode() override {
    if (fn_) tls_reaper.fns.push_back(std::move(fn_));
  }
  std::vector<Tensor> apply(const Tensor& g) override {
    EMBER_CHECK(fn_, "backward: the graph through '", name_,
                "' was already freed by an earlier backward; pass retain_graph=true to backward twice");
    std::vector<Tensor> grads;
    if (once_ && tls_grad_enabled) {
      {
        NoGradGuard off;
        grads = fn_(g);
      }
      std::shared_ptr<Node> error;
      for (Tensor& gi : grads) {
        if (!gi.defined()) continue;
        if (!error) {
          error = std::make_shared<DelayedError>(name_);
          error->next.push_back(detail::edge_of(g));
          error->next.insert(error->next.end(), next.begin(), next.end());
        }
        gi = attach(gi, error);
      }
    } else {
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
  bool once_;
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
    if (meta.grad.defined() && grad_enabled() && (gc.requires_grad() || meta.grad.requires_grad())) {
      // create_graph: the sum is recorded, so the accumulated gradient differentiates again
      // (Note [In-place arithmetic and autograd] in core/tensor.cpp), as PyTorch's
      // AccumulateGrad does under grad mode.
      meta.grad = add(meta.grad, gc);
    } else if (meta.grad.defined()) {
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

Tensor record_node(const char* name, const std::vector<Tensor>& inputs, const Tensor& out, BackwardFn backward,
                   bool once) {
  if (!needs_grad(inputs)) return out;
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (const Tensor& t : inputs) {
    EMBER_CHECK(!t.defined() || t.impl_ptr() != out.impl_ptr(), "autograd: '", name,
                "' recorded one of its inputs as its output");
    shapes.push_back(t.defined() ? t.shape() : Shape{});
    dtypes.push_back(t.defined() ? t.dtype() : kFloat32);
  }
  auto node = std::make_shared<FunctionNode>(name, std::move(backward), std::move(shapes), std::move(dtypes), once);
  for (const Tensor& t : inputs) node->next.push_back(detail::edge_of(t));
  AutogradMeta& m = meta_of(out);
  m.requires_grad = true;
  m.grad_fn = std::move(node);
  return out;
}

}  // namespace

Node::~Node() {
  for (Edge& e : next)
    if (e.node) tls_reaper.nodes.push_back(std::move(e.node));
  next.clear();
  tls_reaper.drain();
}

Edge detail::edge_of(const Tensor& t) {
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

detail::FormulaScope::FormulaScope(const FormulaContext& ctx) : outer_(std::exchange(tls_formula, ctx)) {}
detail::FormulaScope::~FormulaScope() { tls_formula = outer_; }

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
  return record_node(name, inputs, out, std::move(backward), false);
}

Tensor record_once_differentiable(const char* name, const std::vector<Tensor>& inputs, const Tensor& out,
                                  BackwardFn backward) {
  return record_node(name, inputs, out, std::move(backward), true);
}

Tensor SavedOutput::get() const {
  if (!data_.defined() || !tls_grad_enabled || !tls_formula.node) return data_;
  return attach(data_, tls_formula.node->shared_from_this());
}

bool needs_input_grad(size_t i) {
  const detail::FormulaContext& c = tls_formula;
  if (!c.edges) return true;
  if (i >= c.edges->size() || !(*c.edges)[i].node) return false;
  return !c.needed || (*c.needed)((*c.edges)[i].node.get());
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

Tensor autograd::custom_function(const char* name, const std::vector<Tensor>& inputs, const Tensor& out,
                                 BackwardFunction backward) {
  return autograd::record(name, inputs, out.detach(), std::move(backward));
}

bool Tensor::requires_grad() const {
  const AutogradMeta* m = autograd::find_meta(*this);
  return m && m->requires_grad;
}

const Tensor& Tensor::requires_grad_(bool on) const {
  AutogradMeta& m = autograd::meta_of(*this);
  EMBER_CHECK(!m.grad_fn, "requires_grad_: only leaf tensors can be marked; this one was made by '",
              m.grad_fn->name(), "' (use detach() to make a leaf)");
  EMBER_CHECK(!on || is_floating(dtype()), "requires_grad_: only floating tensors can require grad, not ",
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

}  // namespace ember
