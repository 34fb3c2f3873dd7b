// Activation and dropout layers: ReLU, GELU, Tanh, Sigmoid, LeakyReLU, SiLU, ELU, Dropout,
// Dropout2d. The dropouts are active in training mode only (Module::train / eval), as in
// PyTorch.
#pragma once

#include <string>

#include "core/ops.h"
#include "layers/functional.h"
#include "layers/module.h"

namespace ember::nn {

class ReLU : public Callable<ReLU> {
 public:
  Tensor forward(const Tensor& x) { return relu(x); }
  std::string name() const override { return "ReLU()"; }
};
class GELU : public Callable<GELU> {
 public:
  explicit GELU(bool approximate_tanh = false) : tanh_(approximate_tanh) {}
  Tensor forward(const Tensor& x) { return gelu(x, tanh_); }
  std::string name() const override { return tanh_ ? "GELU(approximate=tanh)" : "GELU()"; }

 private:
  bool tanh_;
};
class Tanh : public Callable<Tanh> {
 public:
  Tensor forward(const Tensor& x) { return tanh(x); }
  std::string name() const override { return "Tanh()"; }
};
class Sigmoid : public Callable<Sigmoid> {
 public:
  Tensor forward(const Tensor& x) { return sigmoid(x); }
  std::string name() const override { return "Sigmoid()"; }
};
class LeakyReLU : public Callable<LeakyReLU> {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : slope_(negative_slope) {}
  Tensor forward(const Tensor& x) { return leaky_relu(x, slope_); }
  std::string name() const override;

 private:
  double slope_;
};
class SiLU : public Callable<SiLU> {
 public:
  Tensor forward(const Tensor& x) { return silu(x); }
  std::string name() const override { return "SiLU()"; }
};
class ELU : public Callable<ELU> {
 public:
  explicit ELU(double alpha = 1.0) : alpha_(alpha) {}
  Tensor forward(const Tensor& x) { return elu(x, alpha_); }
  std::string name() const override;

 private:
  double alpha_;
};

class Dropout : public Callable<Dropout> {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) { return functional::dropout(x, p_, is_training()); }
  std::string name() const override;

 private:
  double p_;
};

// Zeroes whole channels of [N, C, H, W] (or [N, C, L]) in training mode, as F.dropout2d.
class Dropout2d : public Callable<Dropout2d> {
 public:
  explicit Dropout2d(double p = 0.5);
  Tensor forward(const Tensor& x) { return dropout2d(x, p_, is_training()); }
  std::string name() const override;

 private:
  double p_;
};

}  // namespace ember::nn
