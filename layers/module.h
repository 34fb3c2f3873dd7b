// nn::Module: the base of every layer. A module owns named parameters (tensors that
// require grad), named buffers (state such as batch norm's running statistics) and
// named submodules; names are dotted paths ("features.0.weight"), as in PyTorch, so
// state dicts line up with PyTorch's.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/meta.h"
#include "core/tensor.h"

namespace ember::nn {

class Module {
 public:
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

  std::vector<Tensor> parameters() const;
  NamedTensors named_parameters() const;
  NamedTensors named_buffers() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }

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

  // Parameters then buffers, by dotted name; values are detached views of the module's data.
  NamedTensors state_dict() const;
  // Copies values into the module. strict: the names must match exactly; an error lists
  // the missing and unexpected keys and the shape mismatches, and nothing is changed.
  void load_state_dict(const NamedTensors& state, bool strict = true);

  // An indented tree of the module and its children.
  std::string str() const;

  // Registers `t` as a parameter (marking it requires_grad) and returns it. Public, as in
  // PyTorch, so that a model can be assembled without subclassing.
  Tensor register_parameter(const std::string& name, Tensor t);
  Tensor register_buffer(const std::string& name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  void collect(const std::string& prefix, bool params, NamedTensors& out) const;
  void str_into(std::string& out, int indent) const;

  NamedTensors params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
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
