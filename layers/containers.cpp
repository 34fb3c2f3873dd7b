#include "layers/containers.h"

#include <optional>
#include <typeinfo>
#include <vector>

#include "base/error.h"
#include "core/autocast.h"
#include "core/autograd.h"
#include "core/random.h"
#include "layers/activation.h"
#include "layers/conv.h"
#include "layers/linear.h"

namespace ember::nn {

Checkpoint::Checkpoint(std::shared_ptr<Module> inner) { register_module("inner", std::move(inner)); }

Tensor Checkpoint::forward(const Tensor& x) {
  const std::shared_ptr<Module> inner_mod = inner();
  std::vector<Tensor> inputs{x};
  for (const Tensor& p : inner_mod->parameters()) inputs.push_back(p);
  bool any = false;
  for (const Tensor& t : inputs) any = any || t.requires_grad();
  const MemoryScope scope(inner_mod.get());
  if (!grad_enabled() || !any) return inner_mod->one_tensor_forward(x);
  // The recompute repeats the forward's random draws and its autocast dtype.
  const Generator saved = default_generator();
  const std::optional<DType> autocast = autocast_dtype();
  Tensor y;
  {
    NoGradGuard no_grad;
    y = inner_mod->one_tensor_forward(x);
  }
  return autograd::custom_function("checkpoint", inputs, y,
                         [inner = inner_mod, x = x.detach(), needs_x = x.requires_grad(), saved, autocast,
                          n = inputs.size()](const Tensor& g) {
    Generator& gen = default_generator();
    const Generator after = gen;
    gen = saved;
    std::vector<Tensor> grads(n);
    {
      EnableGradGuard grad_on;
      std::optional<AutocastScope> autocast_on;
      if (autocast) autocast_on.emplace(*autocast);
      Tensor xi = needs_x ? x.detach().requires_grad_() : x;
      const MemoryScope scope(inner.get());
      Tensor yi = inner->one_tensor_forward(xi);
      yi.backward(g);  // the parameters' gradients accumulate here
      if (needs_x) grads[0] = xi.grad();
    }
    gen = after;
    return grads;
  });
}

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}
void Sequential::push_back(std::shared_ptr<Module> m) { register_module(std::to_string(size()), std::move(m)); }
Module& Sequential::operator[](size_t i) const {
  EMBER_CHECK(i < size(), "Sequential: index ", i, " is out of range for ", size(), " modules");
  return *registered_modules()[i].second;
}

namespace {

// A module of exactly type T, not a subclass (whose forward may differ: Note [Calling a
// module]), or null.
template <class T>
T* exactly(Module* m) {
  return m != nullptr && typeid(*m) == typeid(T) ? static_cast<T*>(m) : nullptr;
}

}  // namespace

// Note [Fused activations]. A ReLU after a Linear or Conv2d costs a pass over their output
// in forward (read, write) and one in backward (read the gradient and the output, write),
// each as large as the layer's activations: in the Fashion-MNIST CNN, 12.8 MB per step
// for the first layer alone. Two fusions remove them, and change no value or gradient:
// - ReLU, MaxPool2d: max(relu(x)) = relu(max(x)) (a ReLU is monotonic), so the pool takes
//   the max of the raw input and applies the ReLU to its four times smaller output; its
//   backward masks the gradient at that size, where the maxima are (a window whose max is
//   not positive sends a zero gradient either way).
// - Linear or Conv2d, ReLU (not followed by a pool): the op applies max(0, .) while its
//   output is in cache, and its backward masks the incoming gradient.
// What the user sees is one autograd node instead of two.
Tensor Sequential::forward(const Tensor& x) {
  const auto& mods = registered_modules();
  auto is_relu = [&](size_t i) { return i < mods.size() && exactly<ReLU>(mods[i].second.get()); };
  auto pool_at = [&](size_t i) { return i < mods.size() ? exactly<MaxPool2d>(mods[i].second.get()) : nullptr; };
  Tensor y = x;
  for (size_t i = 0; i < mods.size(); ++i) {
    Module* m = mods[i].second.get();
    const MemoryScope scope(m);  // a fused pair is charged to its first module
    if (fuse_ && is_relu(i) && pool_at(i + 1)) {
      y = pool_at(i + 1)->forward(y, Activation::kReLU);
      ++i;
      continue;
    }
    if (fuse_ && is_relu(i + 1) && !pool_at(i + 2)) {
      if (auto* l = exactly<Linear>(m)) {
        y = l->forward(y, Activation::kReLU);
        ++i;
        continue;
      }
      if (auto* c = exactly<Conv2d>(m)) {
        y = c->forward(y, Activation::kReLU);
        ++i;
        continue;
      }
    }
    y = m->one_tensor_forward(y);
  }
  return y;
}

ModuleList::ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}
void ModuleList::push_back(std::shared_ptr<Module> m) { register_module(std::to_string(size()), std::move(m)); }
const std::shared_ptr<Module>& ModuleList::operator[](size_t i) const {
  EMBER_CHECK(i < size(), "ModuleList: index ", i, " is out of range for ", size(), " modules");
  return registered_modules()[i].second;
}
void ModuleList::wrong_type(size_t i) const {
  throw Error(detail::str("ModuleList: module ", i, " is a ", (*this)[i]->name(), ", not the type asked for"));
}

ModuleDict::ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules) {
  for (const auto& [k, m] : modules) insert(k, m);
}
void ModuleDict::insert(const std::string& key, std::shared_ptr<Module> m) {
  EMBER_CHECK(!contains(key), "ModuleDict: the key '", key, "' is already used");
  register_module(key, std::move(m));
}
bool ModuleDict::contains(const std::string& key) const {
  for (const auto& [k, m] : registered_modules())
    if (k == key) return true;
  return false;
}
const std::shared_ptr<Module>& ModuleDict::operator[](const std::string& key) const {
  for (const auto& [k, m] : registered_modules())
    if (k == key) return m;
  std::string held;
  for (const auto& k : keys()) held += (held.empty() ? "" : ", ") + k;
  throw Error("ModuleDict: no module under '" + key + "' (keys: " + (held.empty() ? "none" : held) + ")");
}
std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, m] : registered_modules()) out.push_back(k);
  return out;
}

std::shared_ptr<Sequential> checkpoint_blocks(const Sequential& model) {
  std::vector<std::shared_ptr<Sequential>> blocks;
  bool has_params = false;  // the last block's; modules before the first with parameters join its block
  for (const std::shared_ptr<Module>& m : model) {
    const bool params = !m->parameters().empty();
    if (blocks.empty() || (params && has_params)) {
      blocks.push_back(std::make_shared<Sequential>());
      has_params = false;
    }
    blocks.back()->push_back(m);
    has_params = has_params || params;
  }
  auto out = std::make_shared<Sequential>();
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (i + 1 < blocks.size()) out->push_back(std::make_shared<Checkpoint>(blocks[i]));
    else out->push_back(blocks[i]);
  }
  return out;
}

}  // namespace ember::nn
