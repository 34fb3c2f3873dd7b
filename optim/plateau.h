// ReduceLROnPlateau with PyTorch 1.13's rules: step(metric) once an epoch; when the metric
// has not improved on the best by more than `threshold` (relative: best * (1 - threshold)
// in mode kMin; absolute: best - threshold) for more than `patience` epochs, every
// group's rate becomes max(lr * factor, min_lr), unless that changes it by eps or less;
// then `cooldown` epochs pass before bad epochs count again.
#pragma once

#include "optim/lr_scheduler.h"

namespace ember::optim {

class ReduceLROnPlateau : public Scheduler {
 public:
  enum class Mode { kMin, kMax };
  enum class ThresholdMode { kRel, kAbs };
  struct Options {
    Mode mode = Mode::kMin;
    double factor = 0.1;
    int64_t patience = 10;
    double threshold = 1e-4;
    ThresholdMode threshold_mode = ThresholdMode::kRel;
    int64_t cooldown = 0;
    double min_lr = 0;              // for every group, unless min_lrs gives one per group
    std::vector<double> min_lrs{};
    double eps = 1e-8;
  };
  ReduceLROnPlateau(Optimizer& opt, Options o);
  void step(double metric);
  int64_t epoch() const { return epoch_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  bool in_cooldown() const { return cooldown_counter_ > 0; }
  // The optimizer's rates (this scheduler changes them only when it reduces them).
  std::vector<double> get_last_lr() const override;
  // "last_epoch", "best" (0 with "best_set" 0 before the first step: checkpoints hold
  // finite values only), "num_bad_epochs", "cooldown_counter", and the settings, which
  // load_state_dict requires to equal this scheduler's.
  NamedTensors state_dict() const override;
  void load_state_dict(const NamedTensors& state) override;

 private:
  bool is_better(double a) const;
  NamedTensors settings() const;

  Optimizer& opt_;
  Options o_;
  std::vector<double> min_lrs_;
  bool best_set_ = false;
  double best_ = 0;
  int64_t epoch_ = 0, num_bad_epochs_ = 0, cooldown_counter_ = 0;
};

}  // namespace ember::optim
