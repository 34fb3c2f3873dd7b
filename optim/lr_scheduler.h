// Learning-rate schedules with Python PyTorch's semantics: lr(e) is the rate in effect
// for epoch e, after e calls of step(), and lr(0) is each group's base rate (its lr when
// the scheduler was made). Every parameter group is scheduled from its own base rate.
// (libtorch 1.13's C++ StepLR decays one epoch later than Python's; ember follows Python.)
//
// Each schedule here is a closed form of the epoch, so its state is the epoch and the base
// rates: state_dict() holds "last_epoch", "base_lrs" and the schedule's numeric settings,
// which load_state_dict() requires to equal its own (a state of another schedule, or of
// other settings, is an error naming the key). Like PyTorch's, loading a scheduler's state
// does not set the optimizer's rates: the optimizer's own state holds them (checkpoints
// save both, optim/checkpoint.h). OneCycleLR is in optim/one_cycle.h, ReduceLROnPlateau
// (driven by a metric) in optim/plateau.h.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "optim/optimizer.h"

namespace ember::optim {

// What checkpoints save of a scheduler.
class Scheduler {
 public:
  virtual ~Scheduler() = default;
  // Every group's rate as the scheduler last set it (PyTorch's get_last_lr()).
  virtual std::vector<double> get_last_lr() const = 0;
  virtual NamedTensors state_dict() const = 0;
  // Checks everything before it changes anything.
  virtual void load_state_dict(const NamedTensors& state) = 0;
};

class LRScheduler : public Scheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  // Advances one epoch and sets every group's learning rate.
  void step();
  int64_t epoch() const { return epoch_; }
  // Jumps to epoch e (e.g. when resuming) and sets the rates for it.
  void set_epoch(int64_t e);
  double base_lr(size_t group = 0) const { return base_lrs_.at(group); }
  // The rate of `group` at `epoch`.
  virtual double lr_at(int64_t epoch, size_t group = 0) const = 0;
  std::vector<double> get_last_lr() const override;
  NamedTensors state_dict() const override;
  void load_state_dict(const NamedTensors& state) override;

 protected:
  // The schedule's numeric settings, as state_dict() saves them and load_state_dict()
  // checks them.
  virtual NamedTensors settings() const = 0;
  // Called by set_epoch after the rates are set (OneCycleLR sets the momentum there).
  virtual void on_epoch(int64_t /*epoch*/) {}
  // A per-group value: one for every group, or one for all.
  std::vector<double> per_group(const std::vector<double>& values, const char* what) const;
  Optimizer& opt_;
  std::vector<double> base_lrs_;
  int64_t epoch_ = 0;
};

// base * gamma^(e // step_size)
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t e, size_t group = 0) const override;

 protected:
  NamedTensors settings() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// base * gamma^(number of milestones <= e); a milestone given twice counts twice.
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma = 0.1);
  double lr_at(int64_t e, size_t group = 0) const override;

 protected:
  NamedTensors settings() const override;

 private:
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

// base * gamma^e
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& opt, double gamma);
  double lr_at(int64_t e, size_t group = 0) const override;

 protected:
  NamedTensors settings() const override;

 private:
  double gamma_;
};

// base * lambda(e), with one lambda for every group or one per group. Its state cannot
// hold the lambdas (PyTorch's holds them only when they are objects): the same lambdas
// must be given when resuming.
class LambdaLR : public LRScheduler {
 public:
  using Lambda = std::function<double(int64_t)>;
  LambdaLR(Optimizer& opt, Lambda lambda) : LambdaLR(opt, std::vector<Lambda>{std::move(lambda)}) {}
  LambdaLR(Optimizer& opt, std::vector<Lambda> lambdas);
  double lr_at(int64_t e, size_t group = 0) const override;

 protected:
  NamedTensors settings() const override { return {}; }

 private:
  std::vector<Lambda> lambdas_;
};

// eta_min + (base - eta_min)(1 + cos(pi e / T_max)) / 2, following the cosine past T_max.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min = 0);
  double lr_at(int64_t e, size_t group = 0) const override;

 protected:
  NamedTensors settings() const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// base * (start_factor + (1 - start_factor) min(e, warmup) / warmup): a linear ramp to
// the base rate over `warmup` epochs (PyTorch's LinearLR with end_factor 1).
class LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(Optimizer& opt, int64_t warmup, double start_factor = 1.0 / 3);
  double lr_at(int64_t e, size_t group = 0) const override;

 protected:
  NamedTensors settings() const override;

 private:
  int64_t warmup_;
  double start_;
};

// Checks a scheduler state's settings against `mine`: the same keys, shapes and values.
void check_scheduler_settings(const char* op, const NamedTensors& mine, const std::map<std::string, Tensor>& given);

}  // namespace ember::optim
