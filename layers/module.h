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
// copyable (a copy's references would point into the original). Submodules work the same
// way through nn::Child<M> (below): register_module returns a handle on the registry's
// slot, and a member `nn::Child<Linear> fc` reads that slot on every use, so after
// replace_module("fc", ...) it sees the new module, or, when a subclass put another type
// there (word_language_model's Linear in place of nn::Transformer's decoder stack), is an
// ember::Error naming both rather than the module replaced. A `std::shared_ptr<Linear>`
// member still compiles (the handle converts to it) and is a snapshot, as in libtorch:
// after a replace_module it must be assigned again.
//
// Note [Calling a module]. forward is not virtual: a module declares whatever forward it
// needs (one tensor to one, q/k/v to a pair, one tensor to a tuple, as the VAE does) and
// derives from nn::Callable<Self>, whose operator() runs Self::forward in the module's
// memory scope (core/meta.h) so memory estimates and the profiler see it. Containers, which
// hold modules as nn::Module, reach a forward of one tensor to one through the virtual
// one_tensor_forward that Callable fills in when Self has one; Module's own operator()(x)
// runs it. A subclass of a Callable layer with its own forward re-derives Callable:
// `class TransformerModel : public nn::Callable<TransformerModel, nn::Transformer>`.
#pragma once

#include <concepts>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <typeinfo>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/meta.h"
#include "core/tensor.h"

namespace ember::nn {
class Module;
}  // namespace ember::nn

namespace ember::detail {
// A forward that takes one tensor and returns one (Note [Calling a module]).
template <class D>
concept OneTensorForward = requires(D& d, const Tensor& x) {
  { d.forward(x) } -> std::same_as<Tensor>;
};
[[noreturn]] void throw_child_error(const std::string* slot_name, const nn::Module* now, const std::type_info& wanted);
}  // namespace ember::detail

namespace ember::nn {

template <class M>
class Child;

class Module : public std::enable_shared_from_this<Module> {
 public:
  using NamedModules = std::vector<std::pair<std::string, std::shared_ptr<Module>>>;
  // The registry's submodule slots: a deque, so a slot's address never changes (Child).
  using ChildSlots = std::deque<std::pair<std::string, std::shared_ptr<Module>>>;

  Module() = default;
  Module(const Module&) = delete;  // Note [One place per parameter]
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;
  // The module's forward of one tensor to one, whatever this handle's static type: what
  // Sequential, Checkpoint and DistributedDataParallel run (Note [Calling a module]). An
  // ember::Error naming the module when it has none (its forward takes q, k and v, or
  // returns a tuple).
  virtual Tensor one_tensor_forward(const Tensor& x);
  // one_tensor_forward(x) in this module's memory scope (core/meta.h), for memory estimates.
  Tensor operator()(const Tensor& x) {
    const MemoryScope scope(this);
    return one_tensor_forward(x);
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
  // Registers `m` and returns a handle on its slot: keep it in an nn::Child<M> member
  // (Note [One place per parameter]). It lives as long as this module.
  template <class M>
  Child<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    return Child<M>(&add_child(name, std::move(m)));
  }
  // Puts `t` in the slot of an existing parameter or buffer (an ember::Error if there is
  // none): to tie, pass the other module's tensor. Returns the slot.
  Tensor& replace_parameter(const std::string& name, Tensor t);
  Tensor& replace_buffer(const std::string& name, Tensor t);
  // Puts `m` in the slot of the submodule `name` and returns a handle on it; Child members
  // of that slot see `m` from now on.
  template <class M>
  Child<M> replace_module(const std::string& name, std::shared_ptr<M> m) {
    return Child<M>(&set_child(name, std::move(m)));
  }

 protected:
  // The submodules as registered, a module held twice included: what a container runs.
  const ChildSlots& registered_modules() const { return children_; }

 private:
  using Slots = std::deque<std::pair<std::string, Tensor>>;
  void check_new_name(const char* op, const std::string& name) const;
  Tensor& slot(const char* op, Slots& slots, const char* kind, const std::string& name);
  ChildSlots::value_type& add_child(const std::string& name, std::shared_ptr<Module> m);
  ChildSlots::value_type& set_child(const std::string& name, std::shared_ptr<Module> m);
  void walk(const std::string& prefix, std::shared_ptr<Module> me, NamedModules& out,
            std::unordered_set<const Module*>& seen) const;
  NamedTensors named_members(bool params, bool recurse) const;
  void state_into(const std::string& prefix, NamedTensors& out) const;
  void str_into(std::string& out, int indent) const;
  std::shared_ptr<Module> self() const;

  Slots params_, buffers_;
  ChildSlots children_;
  bool training_ = true;
};

// The base of every module with a forward (Note [Calling a module]). Calling the module
// calls Derived::forward with the same arguments, in the module's memory scope, whatever
// those arguments and its result are:
//   class Attention : public nn::Callable<Attention> {
//    public:
//     std::pair<Tensor, Tensor> forward(const Tensor& q, const Tensor& k, const Tensor& v);
//   };
//   auto [out, weights] = (*attention)(q, k, v);
// Base is the module derived from: nn::Module, or a layer whose forward Derived replaces
// (`class Model : public nn::Callable<Model, nn::Transformer>`; Base's constructors are
// inherited).
template <class Derived, class Base = Module>
class Callable : public Base {
 public:
  using Base::Base;
  template <class... Args>
  decltype(auto) operator()(Args&&... args) {
    const MemoryScope scope(this);
    return static_cast<Derived&>(*this).forward(std::forward<Args>(args)...);
  }
  // Derived::forward when it maps one tensor to one, Base's otherwise. Instantiated once
  // Derived is complete (a virtual's body is), so the concept sees Derived's forward.
  Tensor one_tensor_forward(const Tensor& x) override {
    if constexpr (::ember::detail::OneTensorForward<Derived>) {
      return static_cast<Derived&>(*this).forward(x);
    } else {
      return Base::one_tensor_forward(x);
    }
  }
};

// A typed handle on a submodule slot (Note [One place per parameter]): it reads the slot on
// every use, so it always sees what register_module or replace_module last put there. When
// that is not an M, using it is an ember::Error naming the slot and the module now in it.
// Default-constructed: no submodule (an optional one not given; false in a test).
template <class M>
class Child {
 public:
  Child() = default;
  M* get() const {
    if (slot_ == nullptr || slot_->second == nullptr) return nullptr;
    auto* m = dynamic_cast<M*>(slot_->second.get());
    if (m == nullptr) ::ember::detail::throw_child_error(&slot_->first, slot_->second.get(), typeid(M));
    return m;
  }
  M* operator->() const { return checked(); }
  M& operator*() const { return *checked(); }
  explicit operator bool() const { return get() != nullptr; }
  // The module as a shared_ptr (sharing the registry's ownership); null when empty.
  template <class T>
    requires std::convertible_to<M*, T*>
  operator std::shared_ptr<T>() const {  // NOLINT: a handle is used where a module pointer is
    M* m = get();
    if (m == nullptr) return nullptr;
    return std::shared_ptr<T>(slot_->second, m);
  }
  std::shared_ptr<M> ptr() const { return *this; }

 private:
  friend class Module;
  explicit Child(const Module::ChildSlots::value_type* slot) : slot_(slot) {}
  M* checked() const {
    M* m = get();
    if (m == nullptr) ::ember::detail::throw_child_error(slot_ ? &slot_->first : nullptr, nullptr, typeid(M));
    return m;
  }
  const Module::ChildSlots::value_type* slot_ = nullptr;
};

}  // namespace ember::nn
