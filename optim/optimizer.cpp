#include "optim/optimizer.h"

#include <cmath>
#include <algorithm>
#include <unordered_map>

#include "base/error.h"
#include "core/autograd.h"
#include "core/cuda_graph.h"

namespace ember::optim {
namespace {

// ParamGroup's optional options by their names.
std::vector<std::pair<const char*, std::optional<double>>> overrides_of(const ParamGroup& g) {
  return {{"lr", g.lr},       {"weight_decay", g.weight_decay},
          {"momentum", g.momentum}, {"dampening", g.dampening},
          {"beta1", g.beta1}, {"beta2", g.beta2},
          {"eps", g.eps},     {"alpha", g.alpha},
          {"rho", g.rho},     {"lr_decay", g.lr_decay},
          {"initial_accumulator_value", g.initial_accumulator_value}};
}

std::string option_names(const Optimizer::Options& o) {
  std::string s;
  for (const auto& [n, v] : o) s += (s.empty() ? "" : ", ") + n;
  return s;
}

void check_lr(const std::string& op, double lr) {
  EMBER_CHECK(lr >= 0 && std::isfinite(lr), op, ": learning rate must be finite and >= 0, got ", lr);
}

}  // namespace

std::vector<ParamGroup> weight_decay_groups(const std::vector<Tensor>& params) {
  ParamGroup decay, no_decay{.weight_decay = 0};
  for (const Tensor& p : params) (p.dim() >= 2 ? decay : no_decay).params.push_back(p);
  std::vector<ParamGroup> out;
  for (ParamGroup* g : {&decay, &no_decay})
    if (!g->params.empty()) out.push_back(std::move(*g));
  return out;
}

Optimizer::Optimizer(std::vector<Tensor> params, double lr)
    : Optimizer("Optimizer", std::vector<ParamGroup>{{std::move(params)}}, {{"lr", lr}}) {}

Optimizer::Optimizer(std::string name, std::vector<ParamGroup> groups, Options defaults) : name_(std::move(name)) {
  EMBER_CHECK(defaults.count("lr"), name_, ": an optimizer needs a learning rate");
  for (size_t g = 0; g < groups.size(); ++g) {
    Group group{{}, defaults};
    for (const auto& [option, value] : overrides_of(groups[g])) {
      if (!value) continue;
      EMBER_CHECK(defaults.count(option), name_, ": parameter group ", g, " sets ", option, ", which ", name_,
                  " does not have (it has ", option_names(defaults), ")");
      group.options[option] = *value;
    }
    check_lr(name_, group.options.at("lr"));
    for (Tensor& p : groups[g].params) {
      EMBER_CHECK(p.defined() && p.requires_grad() && p.is_leaf(), name_, ": parameter ", params_.size(),
                  " (group ", g, ") is not a leaf tensor that requires grad");
      group.params.push_back(params_.size());
      params_.push_back(std::move(p));
    }
    groups_.push_back(std::move(group));
  }
  EMBER_CHECK(!params_.empty(), name_, ": got no parameters");
  // A tensor listed twice would be stepped twice (PyTorch: "some parameters appear in more
  // than one parameter group"); a module's parameters() lists each once.
  std::unordered_map<const TensorImpl*, size_t> first;
  auto group_of = [&](size_t i) {
    for (size_t g = 0; g < groups_.size(); ++g)
      if (std::find(groups_[g].params.begin(), groups_[g].params.end(), i) != groups_[g].params.end()) return g;
    return size_t{0};
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto [it, fresh] = first.emplace(params_[i].impl_ptr().get(), i);
    EMBER_CHECK(fresh, name_, ": parameters ", it->second, " (group ", group_of(it->second), ") and ", i, " (group ",
                group_of(i), ") are the same tensor of shape ", shape_str(params_[i].shape()),
                " (some parameters appear more than once, in one group or in several; each would be stepped once "
                "per appearance)");
  }
  buffers_.resize(params_.size());
}

void Optimizer::check_groups() const {
  for (const Group& g : groups_) check_options(g.options);
}

Tensor Optimizer::step(const LossClosure& closure) {
  Tensor loss;
  if (closure) {
    EnableGradGuard grad;
    loss = closure();
  }
  update();
  return loss;
}

void Optimizer::set_lr(double lr) {
  check_lr(name_, lr);
  for (size_t g = 0; g < groups_.size(); ++g) set_group_lr(g, lr);
}

void Optimizer::set_group_lr(size_t g, double lr) {
  check_lr(name_, lr);
  EMBER_CHECK(g < groups_.size(), name_, ": no parameter group ", g, " (there are ", groups_.size(), ")");
  if (capturable()) {
    // A fill inside a capture would run only at replays, and the host's lr would disagree.
    EMBER_CHECK(!is_current_stream_capturing(lr_t_[g].device()),
                "Optimizer::set_lr: not inside a CUDA graph capture (set the learning rate between replays)");
    lr_t_[g].fill_(lr);
  }
  groups_[g].options["lr"] = lr;
}

double Optimizer::option(size_t g, const std::string& name) const {
  EMBER_CHECK(g < groups_.size(), name_, ": no parameter group ", g, " (there are ", groups_.size(), ")");
  auto it = groups_[g].options.find(name);
  EMBER_CHECK(it != groups_[g].options.end(), name_, " has no option '", name, "' (it has ",
              option_names(groups_[g].options), ")");
  return it->second;
}

void Optimizer::set_option(size_t g, const std::string& name, double value) {
  if (name == "lr") return set_group_lr(g, value);
  option(g, name);  // checks that it exists
  Options o = groups_[g].options;
  o[name] = value;
  check_options(o);
  groups_[g].options = std::move(o);
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
    EMBER_CHECK(params_[i].device() == d, name_, ": a capturable optimizer takes the parameters of one device; "
                "parameter 0 is on ", d.str(), ", parameter ", i, " on ", params_[i].device().str());
  lr_t_.clear();
  for (size_t g = 0; g < groups_.size(); ++g) lr_t_.push_back(scalar_tensor(group_lr(g), {kFloat64, d}));
  step_t_ = scalar_tensor(static_cast<double>(steps_), {kFloat64, d});
}

void Optimizer::count_step() {
  if (capturable())
    step_t_.add_(Scalar(1));
  else
    ++steps_;
}

Tensor Optimizer::buffer(size_t i, const std::string& name, double initial) {
  for (auto& [n, t] : buffers_[i])
    if (n == name) return t;
  buffers_[i].emplace_back(name, full(params_[i].shape(), Scalar(initial), {params_[i].dtype(), params_[i].device()}));
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
  out.emplace_back("lr", scalar_tensor(lr(), {kFloat64, Device::cpu()}));
  out.emplace_back("step", scalar_tensor(steps(), {kInt64, Device::cpu()}));
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = "group." + std::to_string(g) + ".";
    std::vector<double> idx(groups_[g].params.begin(), groups_[g].params.end());
    out.emplace_back(prefix + "params", tensor(idx, {static_cast<int64_t>(idx.size())}, {kInt64, Device::cpu()}));
    for (const auto& [n, v] : groups_[g].options) out.emplace_back(prefix + n, scalar_tensor(v, {kFloat64, Device::cpu()}));
  }
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

namespace {

// "group.<g>.<name>" split into (g, name); g < 10^9.
std::pair<size_t, std::string> parse_group_key(const std::string& key, const std::string& op) {
  const size_t dot = key.find('.', 6);
  const bool shaped = dot != std::string::npos && dot > 6 && dot - 6 <= 9 &&
                      key.find_first_not_of("0123456789", 6) == dot && dot + 1 < key.size();
  EMBER_CHECK(shaped, op, ": unexpected optimizer key '", key, "' (expected group.<index>.<option>)");
  return {std::stoul(key.substr(6, dot - 6)), key.substr(dot + 1)};
}

}  // namespace

void Optimizer::load_state_dict(const NamedTensors& state) {
  const std::string op = name_ + "::load_state_dict";
  std::map<std::string, Tensor> given(state.begin(), state.end());
  EMBER_CHECK(given.count("lr") && given.count("step"), op, ": an optimizer state needs 'lr' and 'step'");
  // Checked before anything changes: a state from a file may hold anything.
  const Tensor& lr_t = given.at("lr");
  const Tensor& step_t = given.at("step");
  EMBER_CHECK(lr_t.numel() == 1 && step_t.numel() == 1, op, ": 'lr' and 'step' must hold one value each, got ",
              shape_str(lr_t.shape()), " and ", shape_str(step_t.shape()));
  const double lr = lr_t.item<double>();
  EMBER_CHECK(std::isfinite(lr) && lr >= 0, op, ": 'lr' is ", lr, ", expected a finite value >= 0");
  EMBER_CHECK(!is_floating(step_t.dtype()) || std::isfinite(step_t.item<double>()), op, ": 'step' is ",
              step_t.item<double>(), ", expected a whole number >= 0");
  const int64_t steps = step_t.item<int64_t>();
  EMBER_CHECK(steps >= 0, op, ": 'step' is ", steps, ", expected a whole number >= 0");
  // The groups' options: all of them, or (an older state) none, and then "lr" for each.
  std::vector<Options> options;
  for (const Group& g : groups_) options.push_back(g.options);
  std::vector<bool> has_params(groups_.size(), false);
  bool grouped = false;
  size_t state_groups = 0;
  for (const auto& [key, t] : state)
    if (key.rfind("group.", 0) == 0) state_groups = std::max(state_groups, parse_group_key(key, op).first + 1);
  EMBER_CHECK(state_groups == 0 || state_groups == groups_.size(), op, ": the state has ", state_groups,
              " parameter groups, ", name_, " has ", groups_.size());
  for (const auto& [key, t] : state) {
    if (key.rfind("group.", 0) != 0) continue;
    grouped = true;
    const auto [g, name] = parse_group_key(key, op);
    if (name == "params") {
      const std::vector<int64_t> got = t.dim() == 1 && !is_floating(t.dtype()) ? t.to_vector<int64_t>()
                                                                                : std::vector<int64_t>{-1};
      const std::vector<int64_t> want(groups_[g].params.begin(), groups_[g].params.end());
      EMBER_CHECK(got == want, op, ": parameter group ", g, " holds other parameters in the state than here (",
                  got.size(), " against ", want.size(), "; a state of other groups or another model?)");
      has_params[g] = true;
      continue;
    }
    EMBER_CHECK(groups_[g].options.count(name), op, ": '", key, "' is not an option of ", name_, " (it has ",
                option_names(groups_[g].options), "; a state of another optimizer?)");
    EMBER_CHECK(t.numel() == 1 && std::isfinite(t.item<double>()), op, ": '", key, "' must be one finite value");
    options[g][name] = t.item<double>();
  }
  if (grouped) {
    for (size_t g = 0; g < groups_.size(); ++g) {
      EMBER_CHECK(has_params[g], op, ": the state has no 'group.", g, ".params' (", name_, " has ", groups_.size(),
                  " parameter groups)");
      for (const auto& [name, v] : groups_[g].options)
        EMBER_CHECK(given.count("group." + std::to_string(g) + "." + name), op, ": the state has no 'group.", g,
                    ".", name, "'");
    }
  } else {
    for (Options& o : options) o["lr"] = lr;
  }
  for (const Options& o : options) {
    check_lr(op, o.at("lr"));
    check_options(o);
  }
  std::vector<std::vector<std::pair<std::string, Tensor>>> loaded(params_.size());
  const std::vector<std::string> names = buffer_names();
  for (const auto& [key, t] : state) {
    if (key == "lr" || key == "step" || key.rfind("group.", 0) == 0) continue;
    const auto [i, name] = parse_state_key(key, params_.size(), op.c_str());
    EMBER_CHECK(std::find(names.begin(), names.end(), name) != names.end(), op, ": '", key,
                "' is not a buffer of ", name_, " (a state of another optimizer?)");
    EMBER_CHECK(t.shape() == params_[i].shape(), op, ": '", key, "' has shape ", shape_str(t.shape()),
                " but parameter ", i, " has ", shape_str(params_[i].shape()));
    if (non_negative_buffer(name) && t.numel() > 0) {
      const Tensor flat = t.reshape({-1}), negative = lt(flat, Scalar(0)).to(kInt32);
      if (max(negative).item<int64_t>() > 0) {
        const int64_t at = argmax(negative).item<int64_t>();
        EMBER_FAIL(op, ": '", key, "' holds ", flat.select(0, at).item<double>(), " at element ", at,
                   ": it is a sum or mean of squares, never negative (a damaged state)");
      }
    }
    loaded[i].emplace_back(name, t.to(params_[i].dtype()).to(params_[i].device()).contiguous().clone());
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].options = options[g];
    set_group_lr(g, options[g].at("lr"));
  }
  steps_ = steps;
  if (capturable()) step_t_.fill_(static_cast<double>(steps_));
  buffers_ = std::move(loaded);
}

SGD::SGD(std::vector<ParamGroup> groups, Options o)
    : Optimizer("SGD", std::move(groups),
                {{"lr", o.lr}, {"momentum", o.momentum}, {"dampening", o.dampening}, {"weight_decay", o.weight_decay}}),
      nesterov_(o.nesterov) {
  check_groups();
  if (o.capturable) make_capturable();
}

void SGD::check_options(const Optimizer::Options& o) const {
  EMBER_CHECK(o.at("momentum") >= 0 && o.at("weight_decay") >= 0, "SGD: momentum and weight_decay must be >= 0, got ",
              o.at("momentum"), " and ", o.at("weight_decay"));
  EMBER_CHECK(!nesterov_ || (o.at("momentum") > 0 && o.at("dampening") == 0),
              "SGD: Nesterov needs momentum > 0 and no dampening");
}

void SGD::update() {
  NoGradGuard no_grad;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const Optimizer::Options& h = groups_[gi].options;
    const double momentum = h.at("momentum");
    SgdStepOptions so{h.at("lr"), momentum, h.at("dampening"), h.at("weight_decay"), nesterov_};
    // One multi-tensor step per list: parameters whose momentum buffer starts now, and the rest.
    std::vector<Tensor> p[2], g[2], b[2];
    for (size_t i : groups_[gi].params) {
      Tensor grad = params_[i].grad();
      if (!grad.defined()) continue;
      const bool first = momentum != 0 && !has_buffer(i, "momentum_buffer");
      p[first].push_back(params_[i]);
      g[first].push_back(grad);
      b[first].push_back(momentum != 0 ? buffer(i, "momentum_buffer") : Tensor());
    }
    // A momentum buffer starts as the host sees it: a graph captures a step after the first.
    for (int first = 0; first < 2; ++first) {
      if (p[first].empty()) continue;
      if (capturable())
        sgd_step_capturable_(p[first], g[first], b[first], so, first == 1, lr_t_[gi]);
      else
        sgd_step_(p[first], g[first], b[first], so, first == 1);
    }
  }
  count_step();
}

Adam::Adam(std::vector<ParamGroup> groups, Options o, bool decoupled)
    : Optimizer(decoupled ? "AdamW" : "Adam", std::move(groups),
                {{"lr", o.lr}, {"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps}, {"weight_decay", o.weight_decay}}),
      decoupled_(decoupled) {
  check_groups();
  if (o.capturable) make_capturable();
}

void Adam::check_options(const Optimizer::Options& o) const {
  const double b1 = o.at("beta1"), b2 = o.at("beta2");
  EMBER_CHECK(b1 >= 0 && b1 < 1 && b2 >= 0 && b2 < 1, name(), ": betas must be in [0, 1), got ", b1, " and ", b2);
  EMBER_CHECK(o.at("eps") >= 0 && o.at("weight_decay") >= 0, name(), ": eps and weight_decay must be >= 0");
}

void Adam::update() {
  NoGradGuard no_grad;
  count_step();
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const Optimizer::Options& h = groups_[gi].options;
    AdamStepOptions ao{h.at("lr"),  h.at("beta1"), h.at("beta2"), h.at("eps"), h.at("weight_decay"),
                       decoupled_, capturable() ? 1 : steps_};
    std::vector<Tensor> p, g, m, v;
    for (size_t i : groups_[gi].params) {
      Tensor grad = params_[i].grad();
      if (!grad.defined()) continue;
      p.push_back(params_[i]);
      g.push_back(grad);
      m.push_back(buffer(i, "exp_avg"));
      v.push_back(buffer(i, "exp_avg_sq"));
    }
    if (p.empty()) continue;
    if (capturable())
      adam_step_capturable_(p, g, m, v, ao, lr_t_[gi], step_t_);
    else
      adam_step_(p, g, m, v, ao);
  }
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
