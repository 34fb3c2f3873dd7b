// Containers: Sequential (with its activation fusions), ModuleList and ModuleDict (which
// hold modules without calling them, as PyTorch's), Checkpoint (activation checkpointing
// of any module) and checkpoint_blocks.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "layers/module.h"

namespace ember::nn {

// Activation checkpointing: runs `inner` keeping only its input, and in backward runs
// it again -- with the same random draws, so dropout masks repeat -- to differentiate
// it. Memory: the activations inside `inner` live only while its backward runs, at the
// price of a second forward. The parameters of `inner` get their gradients during that
// backward (their post-accumulate hooks fire from it).
class Checkpoint : public Callable<Checkpoint> {
 public:
  explicit Checkpoint(std::shared_ptr<Module> inner);
  Tensor forward(const Tensor& x);
  std::string name() const override { return "Checkpoint"; }
  // The checkpointed module (registered as "inner"; replace_module("inner", m) changes it).
  const std::shared_ptr<Module>& inner() const { return registered_modules().front().second; }
};

// Iterates a container's modules as registered (a module held twice comes twice).
struct ModuleIterator {
  Module::ChildSlots::const_iterator it;
  const std::shared_ptr<Module>& operator*() const { return it->second; }
  ModuleIterator& operator++() {
    ++it;
    return *this;
  }
  bool operator==(const ModuleIterator&) const = default;
};

// Runs its modules in order; children are named "0", "1", ... as in PyTorch. A ReLU
// followed by a MaxPool2d runs inside the pool, after the max; otherwise a Linear or
// Conv2d followed by a ReLU runs as one op with the ReLU fused into it (Note [Fused
// activations] in containers.cpp): the same results bit for bit, passes over the
// activations saved. set_fusion(false) runs the modules one by one. A module given twice
// runs twice (its parameters are listed once). Each module's forward maps one tensor to
// one (Note [Calling a module]); running one that has none is an error naming it.
class Sequential : public Callable<Sequential> {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  void push_back(std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x);
  void set_fusion(bool on) { fuse_ = on; }
  std::string name() const override { return "Sequential"; }
  size_t size() const { return registered_modules().size(); }
  // The i-th module; an ember::Error when i is out of range.
  Module& operator[](size_t i) const;
  auto begin() const { return ModuleIterator{registered_modules().begin()}; }
  auto end() const { return ModuleIterator{registered_modules().end()}; }

 private:
  bool fuse_ = true;
};

// Holds modules by position ("0", "1", ...) so that their parameters are registered and
// named as PyTorch's ModuleList names them; the owner calls them. Iterates over the modules.
class ModuleList : public Module {
 public:
  ModuleList() = default;
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules);
  void push_back(std::shared_ptr<Module> m);
  size_t size() const { return registered_modules().size(); }
  // The i-th module; an ember::Error when i is out of range.
  const std::shared_ptr<Module>& operator[](size_t i) const;
  // The i-th module as its own type; an ember::Error when it is not an M.
  template <class M>
  std::shared_ptr<M> at(size_t i) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[i]);
    if (!m) wrong_type(i);
    return m;
  }
  auto begin() const { return ModuleIterator{registered_modules().begin()}; }
  auto end() const { return ModuleIterator{registered_modules().end()}; }

 private:
  [[noreturn]] void wrong_type(size_t i) const;
};

// Holds modules by name, in insertion order, as PyTorch's ModuleDict.
class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules);
  // Adds a module under a new name (a name already used is an ember::Error).
  void insert(const std::string& key, std::shared_ptr<Module> m);
  bool contains(const std::string& key) const;
  // The module under `key`; an ember::Error naming the key and the keys held otherwise.
  const std::shared_ptr<Module>& operator[](const std::string& key) const;
  std::vector<std::string> keys() const;
  size_t size() const { return registered_modules().size(); }
};

// Activation checkpointing of a Sequential by blocks, as the examples' --checkpoint: each
// module with parameters and the parameter-free modules after it (its ReLU, its pool) form
// a block; every block but the last runs inside a Checkpoint of a Sequential of it. The
// modules are shared with `model`, not copied.
std::shared_ptr<Sequential> checkpoint_blocks(const Sequential& model);

}  // namespace ember::nn
