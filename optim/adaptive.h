// Adadelta, RMSprop and Adagrad with PyTorch 1.13's update rules (torch/optim/*.py, the
// single-tensor paths), composed of ember's tensor ops, so they run on every device. Each
// keeps its state per parameter under PyTorch's names and steps one parameter group at a
// time with the group's options. The step count is the optimizer's (as Adam's here):
// a parameter without a gradient at some step still counts it for Adagrad's lr_decay.
#pragma once

#include "optim/optimizer.h"

namespace ember::optim {

// square_avg = rho square_avg + (1 - rho) g^2;
// delta = sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g;
// acc_delta = rho acc_delta + (1 - rho) delta^2;  p -= lr delta   (g += weight_decay p first)
class Adadelta : public Optimizer {
 public:
  struct Options {
    double lr = 1.0, rho = 0.9, eps = 1e-6, weight_decay = 0;
  };
  Adadelta(std::vector<Tensor> params, Options o) : Adadelta(std::vector<ParamGroup>{{std::move(params)}}, o) {}
  Adadelta(std::vector<ParamGroup> groups, Options o);

 protected:
  void update() override;
  void check_options(const Optimizer::Options& o) const override;
  std::vector<std::string> buffer_names() const override { return {"square_avg", "acc_delta"}; }
  bool non_negative_buffer(const std::string&) const override { return true; }
};

// square_avg = alpha square_avg + (1 - alpha) g^2; centered: grad_avg = alpha grad_avg +
// (1 - alpha) g and avg = sqrt(square_avg - grad_avg^2) + eps, else sqrt(square_avg) + eps;
// momentum > 0: buf = momentum buf + g / avg, p -= lr buf; else p -= lr g / avg.
class RMSprop : public Optimizer {
 public:
  struct Options {
    double lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0;
    bool centered = false;
  };
  RMSprop(std::vector<Tensor> params, Options o) : RMSprop(std::vector<ParamGroup>{{std::move(params)}}, o) {}
  RMSprop(std::vector<ParamGroup> groups, Options o);

 protected:
  void update() override;
  void check_options(const Optimizer::Options& o) const override;
  std::vector<std::string> buffer_names() const override { return {"square_avg", "momentum_buffer", "grad_avg"}; }
  bool non_negative_buffer(const std::string& name) const override { return name == "square_avg"; }

 private:
  bool centered_;
};

// sum += g^2 (sum starts at initial_accumulator_value); p -= clr g / (sqrt(sum) + eps)
// with clr = lr / (1 + (t - 1) lr_decay) at the 1-based step t.
class Adagrad : public Optimizer {
 public:
  struct Options {
    double lr = 1e-2, lr_decay = 0, weight_decay = 0, initial_accumulator_value = 0, eps = 1e-10;
  };
  Adagrad(std::vector<Tensor> params, Options o) : Adagrad(std::vector<ParamGroup>{{std::move(params)}}, o) {}
  Adagrad(std::vector<ParamGroup> groups, Options o);

 protected:
  void update() override;
  void check_options(const Optimizer::Options& o) const override;
  std::vector<std::string> buffer_names() const override { return {"sum"}; }
  bool non_negative_buffer(const std::string&) const override { return true; }
};

}  // namespace ember::optim
