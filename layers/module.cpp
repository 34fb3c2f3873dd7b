#include "layers/module.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <set>
#include <typeinfo>

#include "base/error.h"
#include "core/autograd.h"
#include "core/ops.h"

namespace ember::nn {
namespace {
std::string name_check_msg(const std::string& name) {
  return "Module: the name '" + name + "' must be non-empty and contain no '.'";
}
}  // namespace

std::string Module::name() const {
  // The dynamic type's name without its namespaces: "MyNet" for ember::nn::MyNet or ::MyNet.
  const char* mangled = typeid(*this).name();
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  std::string n = status == 0 && demangled ? demangled.get() : mangled;
  if (const auto lt = n.find('<'); lt != std::string::npos) n.resize(lt);
  if (const auto colons = n.rfind("::"); colons != std::string::npos) n.erase(0, colons + 2);
  return n;
}

Tensor Module::forward(const Tensor&) {
  throw Error(name() + ": forward does not take one tensor; call the module with the arguments its forward takes");
}

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  EMBER_CHECK(!name.empty() && name.find('.') == std::string::npos, name_check_msg(name));
  t.set_requires_grad(true);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  EMBER_CHECK(!name.empty() && name.find('.') == std::string::npos, name_check_msg(name));
  buffers_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  EMBER_CHECK(m != nullptr, "register_module: submodule '", name, "' is null");
  EMBER_CHECK(!name.empty() && name.find('.') == std::string::npos, name_check_msg(name));
  children_.emplace_back(name, std::move(m));
}

void Module::collect(const std::string& prefix, bool params, NamedTensors& out) const {
  for (const auto& [n, t] : params ? params_ : buffers_) out.emplace_back(prefix + n, t);
  for (const auto& [n, c] : children_) c->collect(prefix + n + ".", params, out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", true, out);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", false, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

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

NamedTensors Module::state_dict() const {
  NamedTensors out;
  for (auto& [n, t] : named_parameters()) out.emplace_back(n, t.detach());
  for (auto& [n, t] : named_buffers()) out.emplace_back(n, t.detach());
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  NamedTensors own = named_parameters();
  for (auto& b : named_buffers()) own.push_back(b);
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
