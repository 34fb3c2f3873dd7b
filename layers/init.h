// nn::init: in-place initialisation of parameters, outside autograd, with PyTorch's
// formulas (torch.nn.init), so that a model initialised here starts where PyTorch's would
// (the same distributions; the draws come from ember's generator, not PyTorch's):
//
//   init::xavier_uniform_(linear->weight);
//   init::kaiming_normal_(conv->weight, {.mode = init::FanMode::FanOut, .nonlinearity = init::Nonlinearity::ReLU});
//   init::zeros_(conv->bias);
//   init::orthogonal_(rnn_weight, init::calculate_gain(init::Nonlinearity::Tanh));
//
// Each returns its tensor. Random ones draw from `gen` (default: the process-wide
// generator); on the meta device they only check their arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#include "core/random.h"
#include "core/tensor.h"

namespace ember::nn::init {

// PyTorch's nonlinearity names for calculate_gain and kaiming_*.
enum class Nonlinearity {
  Linear, Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d, Sigmoid, Tanh, ReLU, LeakyReLU,
  SELU,
};
enum class FanMode { FanIn, FanOut };

// The recommended gain for a nonlinearity: 1 for the linear and convolution ones and
// Sigmoid, 5/3 for Tanh, sqrt(2) for ReLU, sqrt(2 / (1 + slope^2)) for LeakyReLU (param:
// the negative slope, default 0.01), 3/4 for SELU.
double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param = std::nullopt);
// (fan_in, fan_out) of a weight of at least 2 dims: (size(1), size(0)) times the product
// of dims 2... (the receptive field): [out, in, kh, kw] gives (in kh kw, out kh kw).
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);

const Tensor& constant_(const Tensor& t, double value);
const Tensor& zeros_(const Tensor& t);
const Tensor& ones_(const Tensor& t);
// U(a, b).
const Tensor& uniform_(const Tensor& t, double a = 0, double b = 1, Generator* gen = nullptr);
// N(mean, std^2).
const Tensor& normal_(const Tensor& t, double mean = 0, double std = 1, Generator* gen = nullptr);
// N(mean, std^2) truncated to [a, b], by PyTorch's inverse-CDF method (computed in float64
// on the CPU, then copied to the tensor's device).
const Tensor& trunc_normal_(const Tensor& t, double mean = 0, double std = 1, double a = -2, double b = 2,
                            Generator* gen = nullptr);
// U(-x, x), x = gain sqrt(6 / (fan_in + fan_out)); and N(0, gain^2 2 / (fan_in + fan_out)).
const Tensor& xavier_uniform_(const Tensor& t, double gain = 1, Generator* gen = nullptr);
const Tensor& xavier_normal_(const Tensor& t, double gain = 1, Generator* gen = nullptr);

struct KaimingOptions {
  double a = 0;  // the negative slope of the LeakyReLU after the layer (LeakyReLU only)
  FanMode mode = FanMode::FanIn;
  Nonlinearity nonlinearity = Nonlinearity::LeakyReLU;
};
// std = calculate_gain(nonlinearity, a) / sqrt(fan): U(-sqrt(3) std, sqrt(3) std) and
// N(0, std^2). PyTorch's layers initialise weights with kaiming_uniform_(w, {.a = sqrt(5)}).
const Tensor& kaiming_uniform_(const Tensor& t, KaimingOptions options = {}, Generator* gen = nullptr);
const Tensor& kaiming_normal_(const Tensor& t, KaimingOptions options = {}, Generator* gen = nullptr);

// A (semi-)orthogonal matrix times gain, from the QR decomposition of a standard normal
// [size(0), numel / size(0)] draw (transposed when it has fewer rows than columns), with
// Q's columns signed so that R's diagonal is positive: PyTorch's construction, in float64.
const Tensor& orthogonal_(const Tensor& t, double gain = 1, Generator* gen = nullptr);
// The identity of a 2-D tensor (ones on the main diagonal of a rectangular one).
const Tensor& eye_(const Tensor& t);
// The Dirac delta of a convolution weight [out, in, k...] (3 to 5 dims): output channel
// d of each of `groups` groups copies input channel d (for d < min(out / groups, in)).
const Tensor& dirac_(const Tensor& t, int64_t groups = 1);

// The reduced QR decomposition of a float64 CPU matrix A [m, n] by Householder
// reflections, in float64: (Q [m, k], R [k, n]), k = min(m, n), A = Q R, Q's columns
// orthonormal, R upper triangular with its diagonal made >= 0 (the unique such pair when
// A has full rank). What orthogonal_ uses.
std::pair<Tensor, Tensor> householder_qr(const Tensor& a);

}  // namespace ember::nn::init
