#include "optim/optimizer.h"

#include <cmath>
#include <algorithm>
#include <map>
#include <unordered_map>

#include "base/error.h"
#include "core/autograd.h"
#include "core/cuda_graph.h"

namespace ember::optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr) : params_(std::move(params)), lr_(lr) {
  EMBER_CHECK(!params_.empty(), "Optimizer: got no parameters");
  set_lr(lr);
  for (size_t i = 0; i < params_.size(); ++i)
    EMBER_CHECK(params_[i].defined() && params_[i].requires_grad() && params_[i].is_leaf(), "Optimizer: parameter ", i,
                " is not a leaf tensor that requires grad");
  // A tensor listed twice would be stepped twice (PyTorch: "some parameters appear in more
  // than one parameter group"); a module's parameters() lists each once.
  std::unordered_map<const TensorImpl*, size_t> first;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto [it, fresh] = first.emplace(params_[i].impl_ptr().get(), i);
    EMBER_CHECK(fresh, "Optimizer: parameters ", it->second, " and ", i,
                " are the same tensor (some parameters appear more than once; each would be stepped once per appearance)");
  }
  buffers_.resize(params_.size());
}

void Optimizer::set_lr(double lr) {
  EMBER_CHECK(lr >= 0 && std::isfinite(lr), "Optimizer: learning rate must be finite and >= 0, got ", lr);
  if (capturable()) {
    // A fill inside a capture would run only at replays, and the host's lr_ would disagree.
    EMBER_CHECK(!is_current_stream_capturing(lr_t_.device()),
                "Optimizer::set_lr: not inside a CUDA graph capture (set the learning rate between replays)");
    lr_t_.fill_(lr);
  }
  lr_ = lr;
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const Tensor& p : params_) {
    if (set_to_none)
      p.set_grad({});
    else if (p.grad().defined())
      p.grad().zero_();
  }
}

int64_t Optimizer::steps() const {
  return capturable() ? static_cast<int64_t>(step_t_.item<double>()) : steps_;
}

void Optimizer::make_capturable() {
  const Device d = params_[0].device();
  for (size_t i = 0; i < params_.size(); ++i)
    EMBER_CHECK(params_[i].device() == d, "Optimizer: a capturable optimizer takes the parameters of one device; "
                "parameter 0 is on ", d.str(), ", parameter ", i, " on ", params_[i].device().str());
  lr_t_ = scalar_tensor(lr_, {kFloat64, d});
  step_t_ = scalar_tensor(static_cast<double>(steps_), {kFloat64, d});
}

void Optimizer::count_step() {
  if (capturable())
    step_t_.add_(Scalar(1));
  else
    ++steps_;
}

Tensor Optimizer::buffer(size_t i, const std::string& name) {
  for (auto& [n, t] : buffers_[i])
    if (n == name) return t;
  buffers_[i].emplace_back(name, zeros(params_[i].shape(), {params_[i].dtype(), params_[i].device()}));
  return buffers_[i].back().second;
}

bool Optimizer::has_buffer(size_t i, const std::string& name) const {
  for (const auto& [n, t] : buffers_[i])
    if (n == name) return true;
  return false;
}

int64_t Optimizer::state_bytes() const {
  int64_t n = 0;
  for (const auto& list : buffers_)
    for (const auto& [name, t] : list) n += t.numel() * t.element_size();
  return n;
}

NamedTensors Optimizer::state_dict() const {
  NamedTensors out;
  out.emplace_back("lr", scalar_tensor(lr_, {kFloat64, Device::cpu()}));
  out.emplace_back("step", scalar_tensor(steps(), {kInt64, Device::cpu()}));
  for (size_t i = 0; i < buffers_.size(); ++i)
    for (const auto& [n, t] : buffers_[i]) out.emplace_back("state." + std::to_string(i) + "." + n, t.detach());
  return out;
}

std::pair<size_t, std::string> parse_state_key(const std::string& key, size_t n_params, const char* op) {
  // i in decimal, at most 9 digits
  const size_t dot = key.find('.', 6);
  const bool shaped = key.rfind("state.", 0) == 0 && dot != std::string::npos && dot > 6 && dot - 6 <= 9 &&
                      key.find_first_not_of("0123456789", 6) == dot;
  EMBER_CHECK(shaped, op, ": unexpected optimizer key '", key, "' (expected state.<index>.<buffer>)");
  const size_t i = std::stoul(key.substr(6, dot - 6));
  EMBER_CHECK(i < n_params, op, ": '", key, "' names parameter ", i, " but there are ", n_params);
  return {i, key.substr(dot + 1)};
}

void Optimizer::load_state_dict(const NamedTensors& state) {
  std::map<std::string, Tensor> given(state.begin(), state.end());
  EMBER_CHECK(given.count("lr") && given.count("step"), "load_state_dict: an optimizer state needs 'lr' and 'step'");
  // Checked before anything changes: a state from a file may hold anything.
  const Tensor& lr_t = given.at("lr");
  const Tensor& step_t = given.at("step");
  EMBER_CHECK(lr_t.numel() == 1 && step_t.numel() == 1, "load_state_dict: 'lr' and 'step' must hold one value each, got ",
              shape_str(lr_t.shape()), " and ", shape_str(step_t.shape()));
  const double lr = lr_t.item<double>();
  EMBER_CHECK(std::isfinite(lr) && lr >= 0, "load_state_dict: 'lr' is ", lr, ", expected a finite value >= 0");
  EMBER_CHECK(!is_floating(step_t.dtype()) || std::isfinite(step_t.item<double>()), "load_state_dict: 'step' is ",
              step_t.item<double>(), ", expected a whole number >= 0");
  const int64_t steps = step_t.item<int64_t>();
  EMBER_CHECK(steps >= 0, "load_state_dict: 'step' is ", steps, ", expected a whole number >= 0");
  std::vector<std::vector<std::pair<std::string, Tensor>>> loaded(params_.size());
  for (const auto& [key, t] : state) {
    if (key == "lr" || key == "step") continue;
    const auto [i, name] = parse_state_key(key, params_.size(), "load_state_dict");
    const std::vector<std::string> names = buffer_names();
    EMBER_CHECK(std::find(names.begin(), names.end(), name) != names.end(), "load_state_dict: '", key,
                "' is not a buffer of this optimizer (a state from another optimizer?)");
    EMBER_CHECK(t.shape() == params_[i].shape(), "load_state_dict: '", key, "' has shape ", shape_str(t.shape()),
                " but parameter ", i, " has ", shape_str(params_[i].shape()));
    if (non_negative_buffer(name) && t.numel() > 0) {
      const Tensor flat = t.reshape({-1}), negative = lt(flat, Scalar(0)).to(kInt32);
      if (max(negative).item<int64_t>() > 0) {
        const int64_t at = argmax(negative).item<int64_t>();
        EMBER_FAIL("load_state_dict: '", key, "' holds ", flat.select(0, at).item<double>(), " at element ", at,
                   ": it is a mean of squares, never negative (a damaged state)");
      }
    }
    loaded[i].emplace_back(name, t.to(params_[i].dtype()).to(params_[i].device()).contiguous().clone());
  }
  set_lr(lr);
  steps_ = steps;
  if (capturable()) step_t_.fill_(static_cast<double>(steps_));
  buffers_ = std::move(loaded);
}

SGD::SGD(std::vector<Tensor> params, Options o) : Optimizer(std::move(params), o.lr), o_(o) {
  EMBER_CHECK(o.momentum >= 0 && o.weight_decay >= 0, "SGD: momentum and weight_decay must be >= 0");
  EMBER_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD: Nesterov needs momentum > 0 and no dampening");
  if (o.capturable) make_capturable();
}

void SGD::step() {
  NoGradGuard no_grad;
  SgdStepOptions so{lr_, o_.momentum, o_.dampening, o_.weight_decay, o_.nesterov};
  // One multi-tensor step per list: parameters whose momentum buffer starts now, and the rest.
  std::vector<Tensor> p[2], g[2], b[2];
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor grad = params_[i].grad();
    if (!grad.defined()) continue;
    const bool first = o_.momentum != 0 && !has_buffer(i, "momentum_buffer");
    p[first].push_back(params_[i]);
    g[first].push_back(grad);
    b[first].push_back(o_.momentum != 0 ? buffer(i, "momentum_buffer") : Tensor());
  }
  // A momentum buffer starts as the host sees it: a graph captures a step after the first.
  for (int first = 0; first < 2; ++first) {
    if (p[first].empty()) continue;
    if (capturable())
      sgd_step_capturable_(p[first], g[first], b[first], so, first == 1, lr_t_);
    else
      sgd_step_(p[first], g[first], b[first], so, first == 1);
  }
  count_step();
}

Adam::Adam(std::vector<Tensor> params, Options o, bool decoupled)
    : Optimizer(std::move(params), o.lr), o_(o), decoupled_(decoupled) {
  EMBER_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "Adam: betas must be in [0, 1), got ",
              o.beta1, " and ", o.beta2);
  EMBER_CHECK(o.eps >= 0 && o.weight_decay >= 0, "Adam: eps and weight_decay must be >= 0");
  if (o.capturable) make_capturable();
}

void Adam::step() {
  NoGradGuard no_grad;
  count_step();
  AdamStepOptions ao{lr_, o_.beta1, o_.beta2, o_.eps, o_.weight_decay, decoupled_, capturable() ? 1 : steps_};
  std::vector<Tensor> p, g, m, v;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor grad = params_[i].grad();
    if (!grad.defined()) continue;
    p.push_back(params_[i]);
    g.push_back(grad);
    m.push_back(buffer(i, "exp_avg"));
    v.push_back(buffer(i, "exp_avg_sq"));
  }
  if (p.empty()) return;
  if (capturable())
    adam_step_capturable_(p, g, m, v, ao, lr_t_, step_t_);
  else
    adam_step_(p, g, m, v, ao);
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  EMBER_CHECK(max_norm > 0, "clip_grad_norm_: max_norm must be positive, got ", max_norm);
  NoGradGuard no_grad;
  double total = 0;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) total += sum(mul(g, g)).item<double>();
  }
  total = std::sqrt(total);
  const double scale = max_norm / (total + 1e-6);
  if (scale < 1)
    for (const Tensor& p : params)
      if (p.grad().defined()) p.set_grad(mul(p.grad(), Scalar(scale)));
  return total;
}

}  // namespace ember::optim
