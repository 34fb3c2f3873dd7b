// nn::Module (layers/module.h): registration, PyTorch's listings (each tensor and module
// once, by identity), state dicts, and the tree walks behind them.
#include "layers/module.h"

#include <cxxabi.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <typeinfo>

#include "base/error.h"
#include "core/autograd.h"
#include "core/ops.h"

namespace ember::nn {
namespace {

// A type's name without its namespaces: "MyNet" for ember::nn::MyNet or ::MyNet.
std::string type_name(const std::type_info& type) {
  const char* mangled = type.name();
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  std::string n = status == 0 && demangled ? demangled.get() : mangled;
  if (const auto lt = n.find('<'); lt != std::string::npos) n.resize(lt);
  if (const auto colons = n.rfind("::"); colons != std::string::npos) n.erase(0, colons + 2);
  return n;
}

// The dynamic type's name.
std::string class_name(const Module& m) { return type_name(typeid(m)); }

std::string dotted(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

}  // namespace

std::string Module::name() const { return class_name(*this); }

Tensor Module::one_tensor_forward(const Tensor&) {
  throw Error(name() + ": has no forward that takes one tensor and returns one (Note [Calling a module] in "
              "layers/module.h); call it with the arguments its forward takes");
}

// ----- registration -----

// Messages name the class, not name(): a layer's name() may read members its constructor
// has not set yet when it registers.
void Module::check_new_name(const char* op, const std::string& name) const {
  EMBER_CHECK(!name.empty() && name.find('.') == std::string::npos, op, ": the name '", name,
              "' must be non-empty and contain no '.'");
  const char* kind = nullptr;
  for (const auto& [n, t] : params_)
    if (n == name) kind = "parameter";
  for (const auto& [n, t] : buffers_)
    if (n == name) kind = "buffer";
  for (const auto& [n, m] : children_)
    if (n == name) kind = "submodule";
  EMBER_CHECK(kind == nullptr, op, ": ", class_name(*this), " already has a ", kind, " named '", name, "'");
}

Tensor& Module::register_parameter(const std::string& name, Tensor t) {
  check_new_name("register_parameter", name);
  if (t.defined()) t.requires_grad_(true);
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  check_new_name("register_buffer", name);
  buffers_.emplace_back(name, std::move(t));
  return buffers_.back().second;
}

Module::ChildSlots::value_type& Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  EMBER_CHECK(m != nullptr, "register_module: submodule '", name, "' is null");
  check_new_name("register_module", name);
  return children_.emplace_back(name, std::move(m));
}

Tensor& Module::slot(const char* op, Slots& slots, const char* kind, const std::string& name) {
  for (auto& [n, t] : slots)
    if (n == name) return t;
  std::string held;
  for (const auto& [n, t] : slots) held += (held.empty() ? "" : ", ") + n;
  EMBER_FAIL(op, ": ", class_name(*this), " has no ", kind, " named '", name, "' (", kind, "s: ",
             held.empty() ? "none" : held, ")");
}

Tensor& Module::replace_parameter(const std::string& name, Tensor t) {
  Tensor& s = slot("replace_parameter", params_, "parameter", name);
  if (t.defined()) t.requires_grad_(true);
  s = std::move(t);
  return s;
}

Tensor& Module::replace_buffer(const std::string& name, Tensor t) {
  Tensor& s = slot("replace_buffer", buffers_, "buffer", name);
  s = std::move(t);
  return s;
}

Module::ChildSlots::value_type& Module::set_child(const std::string& name, std::shared_ptr<Module> m) {
  EMBER_CHECK(m != nullptr, "replace_module: the module for '", name, "' is null");
  for (auto& slot : children_) {
    if (slot.first != name) continue;
    slot.second = std::move(m);
    return slot;
  }
  std::string held;
  for (const auto& [n, c] : children_) held += (held.empty() ? "" : ", ") + n;
  EMBER_FAIL("replace_module: ", class_name(*this), " has no submodule named '", name, "' (submodules: ",
             held.empty() ? "none" : held, ")");
}

// ----- listings -----

std::shared_ptr<Module> Module::self() const {
  auto* me = const_cast<Module*>(this);
  if (auto owned = me->weak_from_this().lock()) return owned;
  return std::shared_ptr<Module>(std::shared_ptr<Module>(), me);  // not owned by a shared_ptr: a plain pointer
}

// PyTorch's named_modules: depth first, a module met again (held twice) skipped with its subtree.
void Module::walk(const std::string& prefix, std::shared_ptr<Module> me, NamedModules& out,
                  std::unordered_set<const Module*>& seen) const {
  if (!seen.insert(this).second) return;
  out.emplace_back(prefix, std::move(me));
  for (const auto& [n, c] : children_) c->walk(dotted(prefix, n), c, out, seen);
}

Module::NamedModules Module::named_modules() const {
  NamedModules out;
  std::unordered_set<const Module*> seen;
  walk("", self(), out, seen);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules() const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [n, m] : named_modules()) out.push_back(std::move(m));
  return out;
}

Module::NamedModules Module::named_children() const {
  NamedModules out;
  std::unordered_set<const Module*> seen;
  for (const auto& [n, c] : children_)
    if (seen.insert(c.get()).second) out.emplace_back(n, c);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [n, c] : named_children()) out.push_back(std::move(c));
  return out;
}

// PyTorch's _named_members: the modules of named_modules(), and in each its own tensors,
// each tensor (by identity) under the first name met.
NamedTensors Module::named_members(bool params, bool recurse) const {
  const NamedModules mods = recurse ? named_modules() : NamedModules{{"", self()}};
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  for (const auto& [prefix, m] : mods)
    for (const auto& [n, t] : params ? m->params_ : m->buffers_)
      if (t.defined() && seen.insert(t.impl_ptr().get()).second) out.emplace_back(dotted(prefix, n), t);
  return out;
}

NamedTensors Module::named_parameters(bool recurse) const { return named_members(true, recurse); }
NamedTensors Module::named_buffers(bool recurse) const { return named_members(false, recurse); }

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (const auto& c : children()) c->apply(fn);
  fn(*this);
}

// ----- mode, device, gradients -----

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::to(Device device) {
  for (auto& [n, t] : named_parameters()) t.set_data(t.detach().to(device));
  for (auto& [n, t] : named_buffers()) t.set_data(t.detach().to(device));
}

void Module::to(DType dtype) {
  for (auto& [n, t] : named_parameters()) t.set_data(t.detach().to(dtype));
  for (auto& [n, t] : named_buffers())
    if (is_floating(t.dtype())) t.set_data(t.detach().to(dtype));
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) p.set_grad({});
}

// ----- state dicts -----

// PyTorch's state_dict order: a module's parameters, its buffers, then each submodule's,
// every name (no deduplication).
void Module::state_into(const std::string& prefix, NamedTensors& out) const {
  for (const Slots* slots : {&params_, &buffers_})
    for (const auto& [n, t] : *slots)
      if (t.defined()) out.emplace_back(dotted(prefix, n), t);
  for (const auto& [n, c] : children_) c->state_into(dotted(prefix, n), out);
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  state_into("", out);
  for (auto& [n, t] : out) t = t.detach();
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  NamedTensors own;
  state_into("", own);
  std::map<std::string, Tensor> given(state.begin(), state.end());
  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> own_names;
  for (auto& [n, t] : own) {
    own_names.insert(n);
    auto it = given.find(n);
    if (it == given.end()) {
      missing.push_back(n);
    } else if (it->second.shape() != t.shape()) {
      mismatched.push_back(n + ": checkpoint " + shape_str(it->second.shape()) + ", model " + shape_str(t.shape()));
    }
  }
  for (auto& [n, t] : state)
    if (!own_names.count(n)) unexpected.push_back(n);
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
    return s;
  };
  const bool bad = !mismatched.empty() || (strict && (!missing.empty() || !unexpected.empty()));
  if (bad) {
    std::string msg = "load_state_dict: the state does not fit " + name() + ":";
    if (!missing.empty() && strict) msg += "\n  missing keys: " + join(missing);
    if (!unexpected.empty() && strict) msg += "\n  unexpected keys: " + join(unexpected);
    if (!mismatched.empty()) msg += "\n  shape mismatches: " + join(mismatched);
    throw Error(msg);
  }
  NoGradGuard no_grad;
  for (auto& [n, t] : own) {
    auto it = given.find(n);
    if (it != given.end()) t.copy_(it->second.to(t.device()));
  }
}

std::string Module::str() const {
  std::string out;
  str_into(out, 0);
  return out;
}

void Module::str_into(std::string& out, int indent) const {
  out += name();
  if (children_.empty()) return;
  out += " (\n";
  for (const auto& [n, c] : children_) {
    out += std::string(indent + 2, ' ') + "(" + n + "): ";
    c->str_into(out, indent + 2);
    out += "\n";
  }
  out += std::string(indent, ' ') + ")";
}

}  // namespace ember::nn

namespace ember::detail {

void throw_child_error(const std::string* slot_name, const nn::Module* now, const std::type_info& wanted) {
  const std::string slot = slot_name ? "submodule '" + *slot_name + "'" : "an empty nn::Child";
  if (now == nullptr) throw Error(slot + ": no module is registered there");
  throw Error(str(slot, " now holds a ", nn::class_name(*now), " (put there by replace_module), not the ",
                  nn::type_name(wanted), " this handle reads; read the slot through a handle of the new type"));
}

}  // namespace ember::detail
