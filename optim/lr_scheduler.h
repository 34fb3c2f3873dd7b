// Learning-rate schedules with Python PyTorch's semantics: lr(e) is the rate in effect
// for epoch e, after e calls of step(), and lr(0) is the optimizer's base rate.
// (libtorch 1.13's C++ StepLR decays one epoch later than Python's; ember follows Python.)
#pragma once

#include <cstdint>

#include "optim/optimizer.h"

namespace ember::optim {

class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  // Advances one epoch and sets the optimizer's learning rate.
  void step();
  int64_t epoch() const { return epoch_; }
  // Jumps to epoch e (e.g. when resuming) and sets the rate for it.
  void set_epoch(int64_t e);
  double base_lr() const { return base_lr_; }
  virtual double lr_at(int64_t epoch) const = 0;

 protected:
  Optimizer& opt_;
  double base_lr_;
  int64_t epoch_ = 0;
};

// base * gamma^(e // step_size)
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t e) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// eta_min + (base - eta_min)(1 + cos(pi e / T_max)) / 2, following the cosine past T_max.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min = 0);
  double lr_at(int64_t e) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// base * (start_factor + (1 - start_factor) min(e, warmup) / warmup): a linear ramp to
// the base rate over `warmup` epochs (PyTorch's LinearLR with end_factor 1).
class LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(Optimizer& opt, int64_t warmup, double start_factor = 1.0 / 3);
  double lr_at(int64_t e) const override;

 private:
  int64_t warmup_;
  double start_;
};

}  // namespace ember::optim
