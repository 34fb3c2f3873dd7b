#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace ember::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : opt_(optimizer), base_lr_(optimizer.lr()) {}

void LRScheduler::step() { set_epoch(epoch_ + 1); }

void LRScheduler::set_epoch(int64_t e) {
  EMBER_CHECK(e >= 0, "LRScheduler: epoch must be >= 0, got ", e);
  epoch_ = e;
  opt_.set_lr(lr_at(e));
}

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma) : LRScheduler(opt), step_size_(step_size), gamma_(gamma) {
  EMBER_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
}
double StepLR::lr_at(int64_t e) const { return base_lr_ * std::pow(gamma_, static_cast<double>(e / step_size_)); }

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min)
    : LRScheduler(opt), t_max_(t_max), eta_min_(eta_min) {
  EMBER_CHECK(t_max > 0, "CosineAnnealingLR: T_max must be positive, got ", t_max);
}
double CosineAnnealingLR::lr_at(int64_t e) const {
  return eta_min_ + (base_lr_ - eta_min_) * (1 + std::cos(M_PI * static_cast<double>(e) / static_cast<double>(t_max_))) / 2;
}

LinearWarmup::LinearWarmup(Optimizer& opt, int64_t warmup, double start_factor)
    : LRScheduler(opt), warmup_(warmup), start_(start_factor) {
  EMBER_CHECK(warmup > 0 && start_factor > 0 && start_factor <= 1,
              "LinearWarmup: needs warmup > 0 and 0 < start_factor <= 1, got ", warmup, " and ", start_factor);
  opt.set_lr(lr_at(0));
}
double LinearWarmup::lr_at(int64_t e) const {
  const double f = static_cast<double>(std::min(e, warmup_)) / static_cast<double>(warmup_);
  return base_lr_ * (start_ + (1 - start_) * f);
}

}  // namespace ember::optim
