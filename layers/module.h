// nn::Module: the base of every layer. A module owns named parameters (tensors that
// require grad), named buffers (state such as batch norm's running statistics) and
// named submodules; names are dotted paths ("features.0.weight"), as in PyTorch, so
// state dicts line up with PyTorch's.
//
// What it lists follows PyTorch: parameters(), named_parameters(), buffers(), modules(),
// named_modules() and children() give each tensor and each module once, by identity (a
// module held twice, or a weight tied to two places, is listed under the first name met
// in registration order), so an optimizer steps it once; state_dict() keeps every name,
// tied ones included, as PyTorch's does (optim/checkpoint.h saves a tied tensor once).
//
// Note [One place per parameter]. A layer's handles (Linear::weight, BatchNorm::running_mean)
// are references to its registry's slots, not copies of the tensor beside them: Linear
// declares `Tensor& weight` and binds it to what register_parameter returns (the slot,
// whose address never changes: slots live in a deque that only grows). So there is one
// place per parameter, and the two views of it cannot disagree: `decoder->weight =
// encoder->weight` (tying, as word_language_model and GPT do) and
// `decoder->replace_parameter("weight", t)` both write that place, and the forward, the
// listings, state_dict() and the optimizer all read it. Modules are therefore not
// copyable (a copy's references would point into the original). Submodules held in
// members (`std::shared_ptr<Linear> fc`) are the exception, as in libtorch: replace_module
// returns the new module, and a module that keeps a member must assign it,
// `fc = replace_module("fc", ...)`; ember's containers read their registry and need nothing.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/meta.h"
#include "core/tensor.h"

namespace ember::nn {

class Module : public std::enable_shared_from_this<Module> {
 public:
  using NamedModules = std::vector<std::pair<std::string, std::shared_ptr<Module>>>;

  Module() = default;
  Module(const Module&) = delete;  // Note [One place per parameter]
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;
  // The one-tensor forward, what Sequential calls. A module whose forward takes or returns
  // other things (attention, recurrent layers) derives from Callable (below) instead; this
  // default then says so when it is called with one tensor.
  virtual Tensor forward(const Tensor& x);
  // forward(x) in this module's memory scope (core/meta.h), for memory estimates.
  Tensor operator()(const Tensor& x) {
    const MemoryScope scope(this);
    return forward(x);
  }
  // "Linear(in_features=784, out_features=512, bias=true)"; by default the class's name.
  virtual std::string name() const;

  // ----- what the module holds, each tensor and module once (PyTorch's order) -----
  // This module's own, then each submodule's (depth first, in registration order);
  // recurse = false: this module's own only. Undefined slots (a Linear without bias) are skipped.
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  // The direct submodules.
  std::vector<std::shared_ptr<Module>> children() const;
  NamedModules named_children() const;
  // This module (named "") and every module under it, depth first.
  std::vector<std::shared_ptr<Module>> modules() const;
  NamedModules named_modules() const;
  // fn on every submodule (each child's apply, children in order), then on this module:
  // PyTorch's order (libtorch's apply calls fn on the module first).
  void apply(const std::function<void(Module&)>& fn);

  // Training mode (dropout active, batch norm uses batch statistics) for this module and
  // its submodules.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves or converts every parameter and buffer in place: handles stay valid.
  void to(Device device);
  void to(DType dtype);
  // Clears the gradients of every parameter.
  void zero_grad();

  // Each module's parameters and buffers (PyTorch's order: a module's own, then its
  // submodules'), by dotted name; values are detached views of the module's data. Every
  // name, as PyTorch's: a tied or shared tensor appears under each of its names.
  NamedTensors state_dict() const;
  // Copies values into the module (a tied tensor gets its value from each of its names, in
  // order). strict: the names must match exactly; an error lists the missing and
  // unexpected keys and the shape mismatches, and nothing is changed.
  void load_state_dict(const NamedTensors& state, bool strict = true);

  // An indented tree of the module and its children.
  std::string str() const;

  // ----- registration: public, as in PyTorch, so a model can be assembled without
  // subclassing. A name is non-empty, has no '.', and is used once per module across
  // parameters, buffers and submodules (an ember::Error naming it otherwise). -----
  // Registers `t` (marked requires_grad; undefined: an empty slot, as PyTorch's None) and
  // returns its slot, which a layer binds its handle to (Note [One place per parameter]).
  Tensor& register_parameter(const std::string& name, Tensor t);
  Tensor& register_buffer(const std::string& name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }
  // Puts `t` in the slot of an existing parameter or buffer (an ember::Error if there is
  // none): to tie, pass the other module's tensor. Returns the slot.
  Tensor& replace_parameter(const std::string& name, Tensor t);
  Tensor& replace_buffer(const std::string& name, Tensor t);
  // Puts `m` in place of the submodule `name` and returns it (assign it to the member
  // that holds the old one, if any: Note [One place per parameter]).
  template <class M>
  std::shared_ptr<M> replace_module(const std::string& name, std::shared_ptr<M> m) {
    set_child(name, m);
    return m;
  }

 protected:
  // The submodules as registered, a module held twice included: what a container runs.
  const NamedModules& registered_modules() const { return children_; }

 private:
  using Slots = std::deque<std::pair<std::string, Tensor>>;
  void check_new_name(const char* op, const std::string& name) const;
  Tensor& slot(const char* op, Slots& slots, const char* kind, const std::string& name);
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  void set_child(const std::string& name, std::shared_ptr<Module> m);
  void walk(const std::string& prefix, std::shared_ptr<Module> me, NamedModules& out,
            std::unordered_set<const Module*>& seen) const;
  NamedTensors named_members(bool params, bool recurse) const;
  void state_into(const std::string& prefix, NamedTensors& out) const;
  void str_into(std::string& out, int indent) const;
  std::shared_ptr<Module> self() const;

  Slots params_, buffers_;
  NamedModules children_;
  bool training_ = true;
};

// The base of a module whose forward takes or returns more than one tensor (attention
// takes q, k and v; an LSTM returns its output and its state). Calling the module calls
// Derived::forward with the same arguments, in the module's memory scope as
// Module::operator() does, so memory estimates and the profiler see it:
//   class Attention : public nn::Callable<Attention> {
//    public:
//     std::pair<Tensor, Tensor> forward(const Tensor& q, const Tensor& k, const Tensor& v);
//   };
//   auto [out, weights] = (*attention)(q, k, v);
template <class Derived>
class Callable : public Module {
 public:
  template <class... Args>
  decltype(auto) operator()(Args&&... args) {
    const MemoryScope scope(this);
    return static_cast<Derived&>(*this).forward(std::forward<Args>(args)...);
  }
};

}  // namespace ember::nn
