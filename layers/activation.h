// Activation and dropout layers: ReLU, GELU, Tanh, Sigmoid, LeakyReLU, SiLU, ELU, Dropout. Dropout is active in
// training mode only (Module::train / eval), as in PyTorch.
#pragma once

#include <string>

#include "core/ops.h"
#include "layers/functional.h"
#include "layers/module.h"

namespace ember::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
  std::string name() const override { return "ReLU()"; }
};
class GELU : public Module {
 public:
  explicit GELU(bool approximate_tanh = false) : tanh_(approximate_tanh) {}
  Tensor forward(const Tensor& x) override { return gelu(x, tanh_); }
  std::string name() const override { return tanh_ ? "GELU(approximate=tanh)" : "GELU()"; }

 private:
  bool tanh_;
};
class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override { return tanh(x); }
  std::string name() const override { return "Tanh()"; }
};
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
  std::string name() const override { return "Sigmoid()"; }
};
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : slope_(negative_slope) {}
  Tensor forward(const Tensor& x) override { return leaky_relu(x, slope_); }
  std::string name() const override;

 private:
  double slope_;
};
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return silu(x); }
  std::string name() const override { return "SiLU()"; }
};
class ELU : public Module {
 public:
  explicit ELU(double alpha = 1.0) : alpha_(alpha) {}
  Tensor forward(const Tensor& x) override { return elu(x, alpha_); }
  std::string name() const override;

 private:
  double alpha_;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override { return functional::dropout(x, p_, is_training()); }
  std::string name() const override;

 private:
  double p_;
};

}  // namespace ember::nn
