// OneCycleLR (Smith's 1cycle policy) with PyTorch 1.13's phases, per optimizer step: the
// rate rises from max_lr / div_factor to max_lr over the first pct_start of total_steps,
// then anneals to (max_lr / div_factor) / final_div_factor; three_phase goes back down to
// the initial rate symmetrically before the last anneal. With cycle_momentum the
// optimizer's "momentum" (SGD, RMSprop) or "beta1" (Adam, AdamW) moves the other way,
// between max_momentum and base_momentum. Stepping past total_steps is an error; at
// total_steps itself the anneal extrapolates, as PyTorch's, but not below a rate of 0.
#pragma once

#include "optim/lr_scheduler.h"

namespace ember::optim {

class OneCycleLR : public LRScheduler {
 public:
  enum class Anneal { kCos, kLinear };
  struct Options {
    double max_lr = 0;               // for every group, unless max_lrs gives one per group
    std::vector<double> max_lrs{};
    int64_t total_steps = 0;         // or epochs * steps_per_epoch
    int64_t epochs = 0, steps_per_epoch = 0;
    double pct_start = 0.3;
    Anneal anneal_strategy = Anneal::kCos;
    bool cycle_momentum = true;
    double base_momentum = 0.85, max_momentum = 0.95;
    double div_factor = 25, final_div_factor = 1e4;
    bool three_phase = false;
  };
  OneCycleLR(Optimizer& opt, Options o);
  double lr_at(int64_t e, size_t group = 0) const override;
  // The momentum (or beta1) of `group` at step e.
  double momentum_at(int64_t e, size_t group = 0) const;
  int64_t total_steps() const { return total_steps_; }

 protected:
  NamedTensors settings() const override;
  void on_epoch(int64_t e) override;

 private:
  struct Phase {
    double end_step;
    int start_lr, end_lr;              // 0 initial, 1 max, 2 min
    bool start_momentum_max, end_momentum_max;
  };
  // (lr, momentum) of group g at step e.
  std::pair<double, double> at(int64_t e, size_t g) const;

  Options o_;
  int64_t total_steps_;
  std::vector<double> max_lrs_;
  std::vector<Phase> phases_;
  std::string momentum_name_;  // "momentum", "beta1" or "" (not cycled)
};

}  // namespace ember::optim
