// Optimizers (SGD, Adam, AdamW here; Adadelta, RMSprop, Adagrad in optim/adaptive.h, LBFGS
// in optim/lbfgs.h) with PyTorch's update rules. SGD and Adam run the fused multi-tensor
// updates of core (sgd_step_, adam_step_), one call per parameter group.
//
// Parameter groups (PyTorch's param_groups): an optimizer takes a list of tensors, or a
// list of ParamGroups, each with its tensors and the options it sets differently from the
// optimizer's (the usual one: biases and norm weights without weight decay,
// weight_decay_groups()). Each group keeps its numeric options by PyTorch's name ("lr",
// "weight_decay", "momentum", "beta1", ...); schedulers set every group's "lr" (and
// OneCycleLR "momentum" or "beta1"). Flags (nesterov, centered, capturable) are the
// optimizer's, not per group. A tensor in two groups, or twice in one, is an error.
//
// state_dict() holds "lr" (the first group's), the step count, each group's options
// ("group.<g>.<option>") and parameter indices ("group.<g>.params"), and every
// per-parameter buffer ("state.<i>.<buffer>", i counting parameters across groups in
// order), so a resumed run continues exactly.
//
// Options::capturable (PyTorch's capturable=True) makes step() capturable in a CUDA graph
// (core/cuda_graph.h): each group's learning rate and the step count live in float64
// scalar tensors on the parameters' device, step() advances the count there and the
// kernels read both when they run, so each replay is the next step. set_lr() writes the
// device's copy (between replays, never inside a capture). The updates equal the ordinary
// ones (docs/training.md, "Capturable optimizers"); the state_dict format is the same.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/ops.h"

namespace ember::optim {

// A group's tensors and the options it overrides; unset options are the optimizer's. An
// option the optimizer does not have (beta1 for SGD) is an error.
struct ParamGroup {
  std::vector<Tensor> params{};
  std::optional<double> lr{}, weight_decay{}, momentum{}, dampening{}, beta1{}, beta2{}, eps{}, alpha{}, rho{},
      lr_decay{}, initial_accumulator_value{};
};

// The usual two groups: tensors of 2 or more dims (weights of linear and conv layers) with
// the optimizer's weight decay, and the rest (biases, norm layers' weights and biases)
// with weight_decay 0. An empty group is left out.
std::vector<ParamGroup> weight_decay_groups(const std::vector<Tensor>& params);

// Recomputes the loss and the gradients (zero_grad, forward, backward) and returns the loss
// (libtorch's LossClosure).
using LossClosure = std::function<Tensor()>;

class Optimizer {
 public:
  using Options = std::map<std::string, double>;  // a group's numeric options by name

  // `name` for messages; `defaults`: every option this optimizer has, with its value.
  Optimizer(std::string name, std::vector<ParamGroup> groups, Options defaults);
  // One group of `params` with learning rate `lr` (comm::ZeroOptimizer).
  Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  // Updates every parameter that has a gradient.
  void step() { update(); }
  // Evaluates `closure` with gradients enabled, then steps; returns its loss. LBFGS calls it
  // several times per step and needs it.
  virtual Tensor step(const LossClosure& closure);
  // set_to_none = false zeroes existing gradients in place, so they keep their addresses
  // (what a CUDA graph that accumulates into them needs).
  void zero_grad(bool set_to_none = true);
  const std::string& name() const { return name_; }

  // The first group's learning rate; set_lr sets every group's.
  double lr() const { return group_lr(0); }
  void set_lr(double lr);
  size_t num_groups() const { return groups_.size(); }
  double group_lr(size_t g) const { return option(g, "lr"); }
  void set_group_lr(size_t g, double lr);
  // A group's option by PyTorch's name; has_option says whether this optimizer has it.
  bool has_option(const std::string& name) const { return groups_[0].options.count(name) > 0; }
  double option(size_t g, const std::string& name) const;
  void set_option(size_t g, const std::string& name, double value);
  // The indices (into params()) of group g's tensors.
  const std::vector<size_t>& group_params(size_t g) const { return groups_.at(g).params; }

  // Every group's tensors, in order.
  const std::vector<Tensor>& params() const { return params_; }
  // Steps taken; when capturable, read from the device (it waits for the device).
  int64_t steps() const;
  bool capturable() const { return step_t_.defined(); }
  // Bytes of the per-parameter state kept (Adam's moments, SGD's momentum buffers); it is
  // made at the first step.
  virtual int64_t state_bytes() const;

  // Virtual for comm::ZeroOptimizer, whose state is sharded across ranks, and LBFGS.
  virtual NamedTensors state_dict() const;
  // Restores a state_dict() of the same optimizer over the same groups and parameter
  // shapes; on a mismatch an ember::Error names the key and nothing is changed. A state
  // without group keys (an older one) sets every group's lr to its "lr".
  virtual void load_state_dict(const NamedTensors& state);

 protected:
  struct Group {
    std::vector<size_t> params;  // indices into params_
    Options options;
  };
  virtual void update() = 0;
  // Refuses a group's options that this optimizer cannot run (a negative eps, betas >= 1):
  // called for every group at construction and for a loaded state.
  virtual void check_options(const Options& /*options*/) const {}
  // Calls check_options for every group; for the constructors of derived optimizers.
  void check_groups() const;
  // The names of the per-parameter buffers this optimizer keeps.
  virtual std::vector<std::string> buffer_names() const = 0;
  // Buffers that hold no negative value in any valid state (Adam's second moment, a mean
  // of squares): load_state_dict refuses a state where they do.
  virtual bool non_negative_buffer(const std::string& /*name*/) const { return false; }
  // Per-parameter buffers by name ("momentum_buffer", "exp_avg", ...), made on demand,
  // filled with `initial` (a float64 scalar on the parameter's device).
  Tensor buffer(size_t param, const std::string& name, double initial = 0);
  bool has_buffer(size_t param, const std::string& name) const;
  // Keeps each group's lr and the step count on the parameters' device from now on (one
  // device only).
  void make_capturable();
  // Counts a step: on the device when capturable (a captured step counts at each replay).
  void count_step();
  std::vector<Tensor> params_;
  std::vector<Group> groups_;
  int64_t steps_ = 0;  // when not capturable
  std::vector<Tensor> lr_t_;  // per group: float64 scalars on the device, when capturable
  Tensor step_t_;

 private:
  std::string name_;
  std::vector<std::vector<std::pair<std::string, Tensor>>> buffers_;
};

class SGD : public Optimizer {
 public:
  struct Options {
    double lr = 0.01, momentum = 0, dampening = 0, weight_decay = 0;
    bool nesterov = false;
    bool capturable = false;
  };
  SGD(std::vector<Tensor> params, Options options) : SGD(std::vector<ParamGroup>{{std::move(params)}}, options) {}
  SGD(std::vector<ParamGroup> groups, Options options);

 protected:
  void update() override;
  void check_options(const Optimizer::Options& o) const override;
  std::vector<std::string> buffer_names() const override { return {"momentum_buffer"}; }

 private:
  bool nesterov_;
};

class Adam : public Optimizer {
 public:
  struct Options {
    double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
    bool capturable = false;
  };
  Adam(std::vector<Tensor> params, Options options) : Adam(std::vector<ParamGroup>{{std::move(params)}}, options) {}
  Adam(std::vector<ParamGroup> groups, Options options) : Adam(std::move(groups), options, false) {}

 protected:
  void update() override;
  void check_options(const Optimizer::Options& o) const override;
  std::vector<std::string> buffer_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  bool non_negative_buffer(const std::string& name) const override { return name == "exp_avg_sq"; }
  Adam(std::vector<ParamGroup> groups, Options options, bool decoupled);

 private:
  bool decoupled_;
};

// Adam with decoupled weight decay: p *= 1 - lr * weight_decay before the Adam step.
class AdamW : public Adam {
 public:
  struct Options {
    double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
    bool capturable = false;
  };
  AdamW(std::vector<Tensor> params, Options o) : AdamW(std::vector<ParamGroup>{{std::move(params)}}, o) {}
  AdamW(std::vector<ParamGroup> groups, Options o)
      : Adam(std::move(groups), {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.capturable}, true) {}
};

// Scales the gradients so that their global 2-norm is at most max_norm; returns the norm
// before clipping.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

// A state_dict key "state.<i>.<buffer>" split into (i, buffer), with i < n_params; any
// other key is an ember::Error naming `op`.
std::pair<size_t, std::string> parse_state_key(const std::string& key, size_t n_params, const char* op);

}  // namespace ember::optim
