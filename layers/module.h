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
  virtual Tensor forward(const Tensor& x) = 0;
  // forward(x) in this module's memory scope (core/meta.h), for memory estimates.
  Tensor operator()(const Tensor& x) {
    const MemoryScope scope(this);
    return forward(x);
  }
  // "Linear(in_features=784, out_features=512, bias=true)"
  virtual std::string name() const = 0;

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

 protected:
  // Registers `t` as a parameter (marking it requires_grad) and returns it.
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

}  // namespace ember::nn
