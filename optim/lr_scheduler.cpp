#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "base/error.h"

namespace ember::optim {
namespace {

Tensor host_scalar(double v) { return scalar_tensor(v, {kFloat64, Device::cpu()}); }

}  // namespace

LRScheduler::LRScheduler(Optimizer& optimizer) : opt_(optimizer) {
  for (size_t g = 0; g < opt_.num_groups(); ++g) base_lrs_.push_back(opt_.group_lr(g));
}

void LRScheduler::step() { set_epoch(epoch_ + 1); }

void LRScheduler::set_epoch(int64_t e) {
  EMBER_CHECK(e >= 0, "LRScheduler: epoch must be >= 0, got ", e);
  std::vector<double> lrs;
  for (size_t g = 0; g < base_lrs_.size(); ++g) lrs.push_back(lr_at(e, g));  // may refuse e (OneCycleLR)
  epoch_ = e;
  for (size_t g = 0; g < lrs.size(); ++g) opt_.set_group_lr(g, lrs[g]);
  on_epoch(e);
}

std::vector<double> LRScheduler::get_last_lr() const {
  std::vector<double> out;
  for (size_t g = 0; g < base_lrs_.size(); ++g) out.push_back(lr_at(epoch_, g));
  return out;
}

std::vector<double> LRScheduler::per_group(const std::vector<double>& values, const char* what) const {
  const size_t n = opt_.num_groups();
  EMBER_CHECK(values.size() == 1 || values.size() == n, what, ": expected one value or ", n,
              " (one per parameter group), got ", values.size());
  return values.size() == n ? values : std::vector<double>(n, values[0]);
}

NamedTensors LRScheduler::state_dict() const {
  NamedTensors out;
  out.emplace_back("last_epoch", scalar_tensor(epoch_, {kInt64, Device::cpu()}));
  out.emplace_back("base_lrs", tensor(base_lrs_, {static_cast<int64_t>(base_lrs_.size())}, {kFloat64, Device::cpu()}));
  for (auto& kv : settings()) out.push_back(kv);
  return out;
}

void check_scheduler_settings(const char* op, const NamedTensors& mine, const std::map<std::string, Tensor>& given) {
  for (const auto& [key, t] : mine) {
    auto it = given.find(key);
    EMBER_CHECK(it != given.end(), op, ": the state has no '", key, "' (a state of another scheduler?)");
    EMBER_CHECK(it->second.shape() == t.shape() && it->second.to_vector<double>() == t.to_vector<double>(), op, ": '",
                key, "' differs between the state and this scheduler (a state of another schedule? resume with the "
                "settings it was saved with)");
  }
}

void LRScheduler::load_state_dict(const NamedTensors& state) {
  const char* op = "LRScheduler::load_state_dict";
  const std::map<std::string, Tensor> given(state.begin(), state.end());
  const NamedTensors mine = settings();
  std::set<std::string> known = {"last_epoch", "base_lrs"};
  for (const auto& [key, t] : mine) known.insert(key);
  for (const auto& [key, t] : state)
    EMBER_CHECK(known.count(key), op, ": unexpected key '", key, "' (a state of another scheduler?)");
  EMBER_CHECK(given.count("last_epoch") && given.count("base_lrs"), op, ": the state needs 'last_epoch' and 'base_lrs'");
  check_scheduler_settings(op, mine, given);
  const Tensor& e = given.at("last_epoch");
  EMBER_CHECK(e.numel() == 1 && !is_floating(e.dtype()) && e.item<int64_t>() >= 0, op,
              ": 'last_epoch' must be a whole number >= 0");
  const Tensor& b = given.at("base_lrs");
  EMBER_CHECK(b.dim() == 1 && b.numel() == static_cast<int64_t>(opt_.num_groups()), op, ": 'base_lrs' has shape ",
              shape_str(b.shape()), " but the optimizer has ", opt_.num_groups(), " parameter groups");
  const std::vector<double> base = b.to_vector<double>();
  for (double v : base) EMBER_CHECK(std::isfinite(v) && v >= 0, op, ": 'base_lrs' holds ", v, ", not a learning rate");
  base_lrs_ = base;
  epoch_ = e.item<int64_t>();
}

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma) : LRScheduler(opt), step_size_(step_size), gamma_(gamma) {
  EMBER_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
}
double StepLR::lr_at(int64_t e, size_t g) const {
  return base_lrs_.at(g) * std::pow(gamma_, static_cast<double>(e / step_size_));
}
NamedTensors StepLR::settings() const {
  return {{"step_size", host_scalar(static_cast<double>(step_size_))}, {"gamma", host_scalar(gamma_)}};
}

MultiStepLR::MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(opt), milestones_(std::move(milestones)), gamma_(gamma) {
  EMBER_CHECK(!milestones_.empty(), "MultiStepLR: needs at least one milestone");
  for (int64_t m : milestones_) EMBER_CHECK(m >= 0, "MultiStepLR: milestones must be >= 0, got ", m);
  std::sort(milestones_.begin(), milestones_.end());
}
double MultiStepLR::lr_at(int64_t e, size_t g) const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), e) - milestones_.begin();
  return base_lrs_.at(g) * std::pow(gamma_, static_cast<double>(passed));
}
NamedTensors MultiStepLR::settings() const {
  return {{"milestones", tensor(std::vector<double>(milestones_.begin(), milestones_.end()),
                                {static_cast<int64_t>(milestones_.size())}, {kInt64, Device::cpu()})},
          {"gamma", host_scalar(gamma_)}};
}

ExponentialLR::ExponentialLR(Optimizer& opt, double gamma) : LRScheduler(opt), gamma_(gamma) {
  EMBER_CHECK(gamma > 0 && std::isfinite(gamma), "ExponentialLR: gamma must be positive, got ", gamma);
}
double ExponentialLR::lr_at(int64_t e, size_t g) const {
  return base_lrs_.at(g) * std::pow(gamma_, static_cast<double>(e));
}
NamedTensors ExponentialLR::settings() const { return {{"gamma", host_scalar(gamma_)}}; }

LambdaLR::LambdaLR(Optimizer& opt, std::vector<Lambda> lambdas) : LRScheduler(opt), lambdas_(std::move(lambdas)) {
  const size_t n = opt.num_groups();
  EMBER_CHECK(lambdas_.size() == 1 || lambdas_.size() == n, "LambdaLR: expected one lambda or ", n,
              " (one per parameter group), got ", lambdas_.size());
  for (const Lambda& l : lambdas_) EMBER_CHECK(l != nullptr, "LambdaLR: a lambda is empty");
  if (lambdas_.size() == 1) lambdas_.assign(n, lambdas_[0]);
  set_epoch(0);  // PyTorch applies lambda(0) at construction
}
double LambdaLR::lr_at(int64_t e, size_t g) const {
  const double f = lambdas_.at(g)(e);
  EMBER_CHECK(std::isfinite(f) && f >= 0, "LambdaLR: the lambda of group ", g, " gave ", f, " at epoch ", e,
              ", expected a finite factor >= 0");
  return base_lrs_.at(g) * f;
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min)
    : LRScheduler(opt), t_max_(t_max), eta_min_(eta_min) {
  EMBER_CHECK(t_max > 0, "CosineAnnealingLR: T_max must be positive, got ", t_max);
}
double CosineAnnealingLR::lr_at(int64_t e, size_t g) const {
  return eta_min_ + (base_lrs_.at(g) - eta_min_) *
                        (1 + std::cos(M_PI * static_cast<double>(e) / static_cast<double>(t_max_))) / 2;
}
NamedTensors CosineAnnealingLR::settings() const {
  return {{"T_max", host_scalar(static_cast<double>(t_max_))}, {"eta_min", host_scalar(eta_min_)}};
}

LinearWarmup::LinearWarmup(Optimizer& opt, int64_t warmup, double start_factor)
    : LRScheduler(opt), warmup_(warmup), start_(start_factor) {
  EMBER_CHECK(warmup > 0 && start_factor > 0 && start_factor <= 1,
              "LinearWarmup: needs warmup > 0 and 0 < start_factor <= 1, got ", warmup, " and ", start_factor);
  set_epoch(0);
}
double LinearWarmup::lr_at(int64_t e, size_t g) const {
  const double f = static_cast<double>(std::min(e, warmup_)) / static_cast<double>(warmup_);
  return base_lrs_.at(g) * (start_ + (1 - start_) * f);
}
NamedTensors LinearWarmup::settings() const {
  return {{"warmup", host_scalar(static_cast<double>(warmup_))}, {"start_factor", host_scalar(start_)}};
}

}  // namespace ember::optim
