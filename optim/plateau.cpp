#include "optim/plateau.h"

#include <cmath>
#include <map>
#include <set>

#include "base/error.h"

namespace ember::optim {
namespace {

Tensor host_scalar(double v) { return scalar_tensor(v, {kFloat64, Device::cpu()}); }

}  // namespace

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& opt, Options o) : opt_(opt), o_(std::move(o)) {
  const char* op = "ReduceLROnPlateau";
  EMBER_CHECK(o_.factor >= 0 && o_.factor < 1, op, ": factor must be in [0, 1), got ", o_.factor);
  EMBER_CHECK(o_.patience >= 0 && o_.cooldown >= 0, op, ": patience and cooldown must be >= 0, got ", o_.patience,
              " and ", o_.cooldown);
  EMBER_CHECK(o_.threshold >= 0 && std::isfinite(o_.threshold) && o_.eps >= 0, op,
              ": threshold and eps must be finite and >= 0, got ", o_.threshold, " and ", o_.eps);
  const size_t n = opt.num_groups();
  if (o_.min_lrs.empty()) {
    min_lrs_.assign(n, o_.min_lr);
  } else {
    EMBER_CHECK(o_.min_lrs.size() == n, op, ": expected ", n, " min_lrs (one per parameter group), got ",
                o_.min_lrs.size());
    min_lrs_ = o_.min_lrs;
  }
  for (double m : min_lrs_) EMBER_CHECK(m >= 0 && std::isfinite(m), op, ": min_lr must be finite and >= 0, got ", m);
}

bool ReduceLROnPlateau::is_better(double a) const {
  if (!best_set_) return o_.mode == Mode::kMin ? a < INFINITY : a > -INFINITY;  // best is the worst value
  if (o_.mode == Mode::kMin)
    return o_.threshold_mode == ThresholdMode::kRel ? a < best_ * (1 - o_.threshold) : a < best_ - o_.threshold;
  return o_.threshold_mode == ThresholdMode::kRel ? a > best_ * (o_.threshold + 1) : a > best_ + o_.threshold;
}

void ReduceLROnPlateau::step(double metric) {
  ++epoch_;
  if (is_better(metric)) {
    best_ = metric;
    best_set_ = true;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (in_cooldown()) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;  // bad epochs in cooldown do not count
  }
  if (num_bad_epochs_ > o_.patience) {
    for (size_t g = 0; g < opt_.num_groups(); ++g) {
      const double old_lr = opt_.group_lr(g), new_lr = std::max(old_lr * o_.factor, min_lrs_[g]);
      if (old_lr - new_lr > o_.eps) opt_.set_group_lr(g, new_lr);
    }
    cooldown_counter_ = o_.cooldown;
    num_bad_epochs_ = 0;
  }
}

std::vector<double> ReduceLROnPlateau::get_last_lr() const {
  std::vector<double> out;
  for (size_t g = 0; g < opt_.num_groups(); ++g) out.push_back(opt_.group_lr(g));
  return out;
}

NamedTensors ReduceLROnPlateau::settings() const {
  return {{"mode_max", host_scalar(o_.mode == Mode::kMax ? 1 : 0)},
          {"factor", host_scalar(o_.factor)},
          {"patience", host_scalar(static_cast<double>(o_.patience))},
          {"threshold", host_scalar(o_.threshold)},
          {"threshold_abs", host_scalar(o_.threshold_mode == ThresholdMode::kAbs ? 1 : 0)},
          {"cooldown", host_scalar(static_cast<double>(o_.cooldown))},
          {"min_lrs", tensor(min_lrs_, {static_cast<int64_t>(min_lrs_.size())}, {kFloat64, Device::cpu()})},
          {"eps", host_scalar(o_.eps)}};
}

NamedTensors ReduceLROnPlateau::state_dict() const {
  NamedTensors out = {{"last_epoch", scalar_tensor(epoch_, {kInt64, Device::cpu()})},
                      {"best", host_scalar(best_set_ ? best_ : 0)},
                      {"best_set", host_scalar(best_set_ ? 1 : 0)},
                      {"num_bad_epochs", scalar_tensor(num_bad_epochs_, {kInt64, Device::cpu()})},
                      {"cooldown_counter", scalar_tensor(cooldown_counter_, {kInt64, Device::cpu()})}};
  for (auto& kv : settings()) out.push_back(kv);
  return out;
}

void ReduceLROnPlateau::load_state_dict(const NamedTensors& state) {
  const char* op = "ReduceLROnPlateau::load_state_dict";
  const std::map<std::string, Tensor> given(state.begin(), state.end());
  const NamedTensors mine = settings();
  std::set<std::string> known = {"last_epoch", "best", "best_set", "num_bad_epochs", "cooldown_counter"};
  for (const auto& [key, t] : mine) known.insert(key);
  for (const auto& [key, t] : state)
    EMBER_CHECK(known.count(key), op, ": unexpected key '", key, "' (a state of another scheduler?)");
  check_scheduler_settings(op, mine, given);
  int64_t counters[3];
  const char* names[3] = {"last_epoch", "num_bad_epochs", "cooldown_counter"};
  for (int i = 0; i < 3; ++i) {
    auto it = given.find(names[i]);
    EMBER_CHECK(it != given.end() && it->second.numel() == 1 && !is_floating(it->second.dtype()) &&
                    it->second.item<int64_t>() >= 0,
                op, ": the state needs '", names[i], "', a whole number >= 0");
    counters[i] = it->second.item<int64_t>();
  }
  for (const char* key : {"best", "best_set"})
    EMBER_CHECK(given.count(key) && given.at(key).numel() == 1 && std::isfinite(given.at(key).item<double>()), op,
                ": the state needs '", key, "', one finite value");
  epoch_ = counters[0], num_bad_epochs_ = counters[1], cooldown_counter_ = counters[2];
  best_set_ = given.at("best_set").item<double>() != 0;
  best_ = given.at("best").item<double>();
}

}  // namespace ember::optim
