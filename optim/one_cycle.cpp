#include "optim/one_cycle.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace ember::optim {
namespace {

Tensor host_scalar(double v) { return scalar_tensor(v, {kFloat64, Device::cpu()}); }

}  // namespace

OneCycleLR::OneCycleLR(Optimizer& opt, Options o) : LRScheduler(opt), o_(std::move(o)) {
  const char* op = "OneCycleLR";
  if (o_.total_steps != 0) {
    EMBER_CHECK(o_.total_steps > 0, op, ": total_steps must be positive, got ", o_.total_steps);
    total_steps_ = o_.total_steps;
  } else {
    EMBER_CHECK(o_.epochs > 0 && o_.steps_per_epoch > 0, op, ": give total_steps, or epochs and steps_per_epoch (",
                "positive), got epochs ", o_.epochs, " and steps_per_epoch ", o_.steps_per_epoch);
    total_steps_ = o_.epochs * o_.steps_per_epoch;
  }
  EMBER_CHECK(o_.pct_start >= 0 && o_.pct_start <= 1, op, ": pct_start must be in [0, 1], got ", o_.pct_start);
  EMBER_CHECK(o_.div_factor > 0 && o_.final_div_factor > 0, op, ": div_factor and final_div_factor must be positive");
  max_lrs_ = o_.max_lrs.empty() ? per_group({o_.max_lr}, op) : per_group(o_.max_lrs, "OneCycleLR max_lrs");
  for (double m : max_lrs_) EMBER_CHECK(m > 0 && std::isfinite(m), op, ": max_lr must be positive, got ", m);
  const double total = static_cast<double>(total_steps_);
  if (o_.three_phase)
    phases_ = {{o_.pct_start * total - 1, 0, 1, true, false},
               {2 * o_.pct_start * total - 2, 1, 0, false, true},
               {total - 1, 0, 2, true, true}};
  else
    phases_ = {{o_.pct_start * total - 1, 0, 1, true, false}, {total - 1, 1, 2, false, true}};
  for (size_t g = 0; g < base_lrs_.size(); ++g) base_lrs_[g] = max_lrs_[g] / o_.div_factor;
  if (o_.cycle_momentum) {
    // As PyTorch: beta1 where the optimizer has betas, else momentum.
    momentum_name_ = opt.has_option("beta1") ? "beta1" : opt.has_option("momentum") ? "momentum" : "";
    EMBER_CHECK(!momentum_name_.empty(), op, ": ", opt.name(), " has neither momentum nor betas to cycle (set ",
                "cycle_momentum = false)");
  }
  set_epoch(0);
}

std::pair<double, double> OneCycleLR::at(int64_t e, size_t g) const {
  EMBER_CHECK(e <= total_steps_, "OneCycleLR: tried to step ", e + 1, " times; total_steps is ", total_steps_);
  const double lrs[3] = {base_lrs_.at(g), max_lrs_.at(g), base_lrs_.at(g) / o_.final_div_factor};
  auto anneal = [&](double start, double end, double pct) {
    return o_.anneal_strategy == Anneal::kCos ? end + (start - end) / 2.0 * (std::cos(M_PI * pct) + 1)
                                              : (end - start) * pct + start;
  };
  double start_step = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& p = phases_[i];
    if (static_cast<double>(e) <= p.end_step || i + 1 == phases_.size()) {
      EMBER_CHECK(p.end_step != start_step, "OneCycleLR: phase ", i, " is empty (pct_start ", o_.pct_start,
                  " of total_steps ", total_steps_, ")");
      const double pct = (static_cast<double>(e) - start_step) / (p.end_step - start_step);
      const double m0 = p.start_momentum_max ? o_.max_momentum : o_.base_momentum;
      const double m1 = p.end_momentum_max ? o_.max_momentum : o_.base_momentum;
      // At e == total_steps (one past the last step, where a loop's last scheduler step
      // lands) the anneal extrapolates; a linear one can go below zero, which PyTorch sets
      // and never uses, and ember's rates are >= 0.
      return {std::max(0.0, anneal(lrs[p.start_lr], lrs[p.end_lr], pct)), anneal(m0, m1, pct)};
    }
    start_step = p.end_step;
  }
  return {0, 0};  // not reached: the last phase always matches
}

double OneCycleLR::lr_at(int64_t e, size_t g) const { return at(e, g).first; }
double OneCycleLR::momentum_at(int64_t e, size_t g) const { return at(e, g).second; }

void OneCycleLR::on_epoch(int64_t e) {
  if (momentum_name_.empty()) return;
  for (size_t g = 0; g < base_lrs_.size(); ++g) opt_.set_option(g, momentum_name_, momentum_at(e, g));
}

NamedTensors OneCycleLR::settings() const {
  return {{"total_steps", host_scalar(static_cast<double>(total_steps_))},
          {"max_lrs", tensor(max_lrs_, {static_cast<int64_t>(max_lrs_.size())}, {kFloat64, Device::cpu()})},
          {"pct_start", host_scalar(o_.pct_start)},
          {"anneal_cos", host_scalar(o_.anneal_strategy == Anneal::kCos ? 1 : 0)},
          {"cycle_momentum", host_scalar(o_.cycle_momentum ? 1 : 0)},
          {"base_momentum", host_scalar(o_.base_momentum)},
          {"max_momentum", host_scalar(o_.max_momentum)},
          {"div_factor", host_scalar(o_.div_factor)},
          {"final_div_factor", host_scalar(o_.final_div_factor)},
          {"three_phase", host_scalar(o_.three_phase ? 1 : 0)}};
}

}  // namespace ember::optim
