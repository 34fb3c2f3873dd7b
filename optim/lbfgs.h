// L-BFGS with PyTorch 1.13's algorithm (torch/optim/lbfgs.py): each step(closure) runs up
// to max_iter iterations of the two-loop recursion over the last history_size updates,
// with a fixed step lr (line_search = kNone: the first iteration's step is scaled by
// min(1, 1 / |g|_1)) or a strong-Wolfe line search (kStrongWolfe, lswolfe.lua's port). The
// parameters are seen as one flat vector (all must share a dtype and a device); the
// vectors are ember tensors and the scalars (dot products, step lengths) doubles on the
// host, so it runs on every device. One parameter group, as PyTorch's.
//
// step() without a closure is an error: the closure must zero the gradients, recompute
// the loss and call backward, and return the loss.
#pragma once

#include <deque>

#include "optim/optimizer.h"

namespace ember::optim {

class LBFGS : public Optimizer {
 public:
  enum class LineSearch { kNone, kStrongWolfe };
  struct Options {
    double lr = 1;
    int64_t max_iter = 20;
    int64_t max_eval = 0;  // 0: max_iter * 5 / 4, PyTorch's default
    double tolerance_grad = 1e-7, tolerance_change = 1e-9;
    int64_t history_size = 100;
    LineSearch line_search = LineSearch::kNone;
  };
  LBFGS(std::vector<Tensor> params, Options o);

  using Optimizer::step;
  // Returns the loss of the closure's first evaluation in this step.
  Tensor step(const LossClosure& closure) override;

  // Evaluations of the closure and iterations, over all steps.
  int64_t func_evals() const { return func_evals_; }
  int64_t n_iter() const { return n_iter_; }

  // The base state plus the search state: "lbfgs.d", "lbfgs.old_dirs" [k, n], ... so that
  // a resumed run continues exactly.
  NamedTensors state_dict() const override;
  void load_state_dict(const NamedTensors& state) override;

 protected:
  void update() override;
  std::vector<std::string> buffer_names() const override { return {}; }

 private:
  Tensor flat_grad() const;
  // p += t * d over the flat parameter vector.
  void add_grad(double t, const Tensor& d);
  void set_params(const std::vector<Tensor>& x);
  std::vector<Tensor> clone_params() const;
  // f and the flat gradient at x + t d; the parameters are x again afterwards.
  std::pair<double, Tensor> directional_evaluate(const LossClosure& closure, const std::vector<Tensor>& x, double t,
                                                 const Tensor& d);
  struct Search {
    double f, t;
    Tensor g;
    int64_t evals;
  };
  Search strong_wolfe(const LossClosure& closure, const std::vector<Tensor>& x, double t, const Tensor& d, double f,
                      const Tensor& g, double gtd);

  Options o_;
  int64_t func_evals_ = 0, n_iter_ = 0;
  // The search state (PyTorch's state of the first parameter); d undefined before the first step.
  Tensor d_, prev_flat_grad_;
  double t_ = 0, h_diag_ = 1, prev_loss_ = 0;
  std::deque<Tensor> old_dirs_, old_stps_;
  std::deque<double> ro_;
};

}  // namespace ember::optim
