// Optimizers (SGD, Adam, AdamW) with PyTorch's update rules, computed by the fused
// in-place updates of core (sgd_step_, adam_step_). zero_grad() clears gradients
// (PyTorch's set_to_none), or zeroes them in place. state_dict() holds the learning rate,
// the step count and every per-parameter buffer, so a resumed run continues exactly.
//
// Options::capturable (PyTorch's capturable=True) makes step() capturable in a CUDA graph
// (core/cuda_graph.h): the learning rate and the step count live in float64 scalar
// tensors on the parameters' device, step() advances the count there and the kernels read
// both when they run, so each replay is the next step. set_lr() writes the device's copy
// (between replays, never inside a capture). The updates equal the ordinary ones
// (docs/training.md, "Capturable optimizers"); the state_dict format is the same.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/ops.h"

namespace ember::optim {

class Optimizer {
 public:
  Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  // Updates every parameter that has a gradient.
  virtual void step() = 0;
  // set_to_none = false zeroes existing gradients in place, so they keep their addresses
  // (what a CUDA graph that accumulates into them needs).
  void zero_grad(bool set_to_none = true);
  double lr() const { return lr_; }
  void set_lr(double lr);
  const std::vector<Tensor>& params() const { return params_; }
  // Steps taken; when capturable, read from the device (it waits for the device).
  int64_t steps() const;
  bool capturable() const { return step_t_.defined(); }
  // Bytes of the per-parameter state kept (Adam's moments, SGD's momentum buffers); it is
  // made at the first step.
  virtual int64_t state_bytes() const;

  // Virtual for comm::ZeroOptimizer, whose state is sharded across ranks.
  virtual NamedTensors state_dict() const;
  // Restores a state_dict() of the same optimizer over the same parameter shapes; on a
  // mismatch an ember::Error names the key and nothing is changed.
  virtual void load_state_dict(const NamedTensors& state);

 protected:
  // The names of the per-parameter buffers this optimizer keeps.
  virtual std::vector<std::string> buffer_names() const = 0;
  // Buffers that hold no negative value in any valid state (Adam's second moment, a mean
  // of squares): load_state_dict refuses a state where they do.
  virtual bool non_negative_buffer(const std::string& /*name*/) const { return false; }
  // Per-parameter buffers by name ("momentum_buffer", "exp_avg", ...), made on demand.
  Tensor buffer(size_t param, const std::string& name);
  bool has_buffer(size_t param, const std::string& name) const;
  // Keeps lr and the step count on the parameters' device from now on (one device only).
  void make_capturable();
  // Counts a step: on the device when capturable (a captured step counts at each replay).
  void count_step();
  std::vector<Tensor> params_;
  double lr_;
  int64_t steps_ = 0;  // when not capturable
  Tensor lr_t_, step_t_;  // float64 scalars on the device, when capturable

 private:
  std::vector<std::vector<std::pair<std::string, Tensor>>> buffers_;
};

class SGD : public Optimizer {
 public:
  struct Options {
    double lr = 0.01, momentum = 0, dampening = 0, weight_decay = 0;
    bool nesterov = false;
    bool capturable = false;
  };
  SGD(std::vector<Tensor> params, Options options);
  void step() override;

 protected:
  std::vector<std::string> buffer_names() const override { return {"momentum_buffer"}; }

 private:
  Options o_;
};

class Adam : public Optimizer {
 public:
  struct Options {
    double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
    bool capturable = false;
  };
  Adam(std::vector<Tensor> params, Options options) : Adam(std::move(params), options, false) {}
  void step() override;

 protected:
  std::vector<std::string> buffer_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  bool non_negative_buffer(const std::string& name) const override { return name == "exp_avg_sq"; }
  Adam(std::vector<Tensor> params, Options options, bool decoupled);

 private:
  Options o_;
  bool decoupled_;
};

// Adam with decoupled weight decay: p *= 1 - lr * weight_decay before the Adam step.
class AdamW : public Adam {
 public:
  struct Options {
    double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
    bool capturable = false;
  };
  AdamW(std::vector<Tensor> params, Options o)
      : Adam(std::move(params), {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.capturable}, true) {}
};

// Scales the gradients so that their global 2-norm is at most max_norm; returns the norm
// before clipping.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

// A state_dict key "state.<i>.<buffer>" split into (i, buffer), with i < n_params; any
// other key is an ember::Error naming `op`.
std::pair<size_t, std::string> parse_state_key(const std::string& key, size_t n_params, const char* op);

}  // namespace ember::optim
