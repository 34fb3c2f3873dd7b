#include "layers/layers.h"

#include <cmath>

#include "base/error.h"
#include "core/autocast.h"
#include "core/autograd.h"
#include "core/random.h"

namespace ember::nn {
namespace {

std::string pair_str(Pair p) { return detail::str("(", p.first, ", ", p.second, ")"); }
std::string pool_str(const char* kind, const Pool2dOptions& o) {
  return std::string(kind) + "(kernel_size=" + pair_str(o.kernel_size) + ", stride=" +
         pair_str(o.stride.value_or(o.kernel_size)) + ", padding=" + pair_str(o.padding) + ")";
}

}  // namespace

// ----- init -----

void uniform_(const Tensor& t, double lo, double hi, Generator* gen) {
  NoGradGuard no_grad;
  t.copy_(add(mul(rand(t.shape(), {t.dtype(), t.device()}, gen), Scalar(hi - lo)), Scalar(lo)));
}

void normal_(const Tensor& t, double mean, double stddev, Generator* gen) {
  NoGradGuard no_grad;
  t.copy_(add(mul(randn(t.shape(), {t.dtype(), t.device()}, gen), Scalar(stddev)), Scalar(mean)));
}

int64_t fan_in(const Tensor& w) {
  EMBER_CHECK(w.dim() >= 2, "fan_in: needs a weight of at least 2 dims, got ", shape_str(w.shape()));
  int64_t f = w.size(1);
  for (int64_t d = 2; d < w.dim(); ++d) f *= w.size(d);
  return f;
}

void kaiming_uniform_(const Tensor& t, double a, Generator* gen) {
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = gain * std::sqrt(3.0 / static_cast<double>(std::max<int64_t>(fan_in(t), 1)));
  uniform_(t, -bound, bound, gen);
}

// ----- layers -----

Linear::Linear(int64_t in, int64_t out, bool with_bias) : in_(in), out_(out) {
  EMBER_CHECK(in > 0 && out > 0, "Linear: features must be positive, got in=", in, " out=", out);
  weight = register_parameter("weight", empty({out, in}));
  kaiming_uniform_(weight);
  if (with_bias) {
    bias = register_parameter("bias", empty({out}));
    const double b = 1.0 / std::sqrt(static_cast<double>(in));
    uniform_(bias, -b, b);
  }
}
Tensor Linear::forward(const Tensor& x, Activation act) { return ember::linear(x, weight, bias, act); }
std::string Linear::name() const {
  return "Linear(in_features=" + std::to_string(in_) + ", out_features=" + std::to_string(out_) +
         ", bias=" + (bias.defined() ? "true" : "false") + ")";
}

Conv2d::Conv2d(int64_t in, int64_t out, Pair k, Pair stride, Pair padding, Pair dilation, int64_t groups, bool with_bias)
    : in_(in), out_(out), groups_(groups), kernel_(k), stride_(stride), padding_(padding), dilation_(dilation) {
  EMBER_CHECK(in > 0 && out > 0 && groups > 0 && in % groups == 0 && out % groups == 0, "Conv2d: channels in=", in,
              " out=", out, " must be positive and divisible by groups=", groups);
  EMBER_CHECK(k.first > 0 && k.second > 0, "Conv2d: kernel_size must be positive, got ", pair_str(k));
  weight = register_parameter("weight", empty({out, in / groups, k.first, k.second}));
  kaiming_uniform_(weight);
  if (with_bias) {
    bias = register_parameter("bias", empty({out}));
    const double b = 1.0 / std::sqrt(static_cast<double>(fan_in(weight)));
    uniform_(bias, -b, b);
  }
}
Tensor Conv2d::forward(const Tensor& x, Activation act) {
  return conv2d(x, weight, bias, stride_, padding_, dilation_, groups_, act);
}
std::string Conv2d::name() const {
  return "Conv2d(" + std::to_string(in_) + ", " + std::to_string(out_) + ", kernel_size=" + pair_str(kernel_) +
         ", stride=" + pair_str(stride_) + ", padding=" + pair_str(padding_) + ")";
}

std::string MaxPool2d::name() const { return pool_str("MaxPool2d", options_); }
std::string AvgPool2d::name() const { return pool_str("AvgPool2d", options_); }
std::string AdaptiveAvgPool2d::name() const { return "AdaptiveAvgPool2d(output_size=" + pair_str(size_) + ")"; }

BatchNorm::BatchNorm(int64_t features, int64_t dims, double eps, double momentum, bool affine)
    : features_(features), dims_(dims), eps_(eps), momentum_(momentum) {
  EMBER_CHECK(features > 0, "BatchNorm: num_features must be positive, got ", features);
  if (affine) {
    weight = register_parameter("weight", ones({features}));
    bias = register_parameter("bias", zeros({features}));
  }
  running_mean = register_buffer("running_mean", zeros({features}));
  running_var = register_buffer("running_var", ones({features}));
  num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, kInt64));
}
Tensor BatchNorm::forward(const Tensor& x) {
  const bool ok = dims_ == 1 ? (x.dim() == 2 || x.dim() == 3) : x.dim() == 4;
  EMBER_CHECK(ok, name(), ": expects ", dims_ == 1 ? "[N, C] or [N, C, L]" : "[N, C, H, W]", " input, got ",
              shape_str(x.shape()));
  if (is_training()) {
    NoGradGuard no_grad;
    num_batches_tracked.copy_(add(num_batches_tracked, Scalar(1)));
  }
  return functional::batch_norm(x, running_mean, running_var, weight, bias, is_training(), momentum_, eps_);
}
std::string BatchNorm::name() const {
  return "BatchNorm" + std::to_string(dims_) + "d(" + std::to_string(features_) + ", eps=" + std::to_string(eps_) +
         ", momentum=" + std::to_string(momentum_) + ")";
}

LayerNorm::LayerNorm(Shape shape, double eps, bool affine) : shape_(std::move(shape)), eps_(eps) {
  if (affine) {
    weight = register_parameter("weight", ones(shape_));
    bias = register_parameter("bias", zeros(shape_));
  }
}
Tensor LayerNorm::forward(const Tensor& x) { return functional::layer_norm(x, shape_, weight, bias, eps_); }
std::string LayerNorm::name() const { return "LayerNorm(" + shape_str(shape_) + ")"; }

Dropout::Dropout(double p) : p_(p) { EMBER_CHECK(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got ", p); }
std::string Dropout::name() const { return "Dropout(p=" + std::to_string(p_) + ")"; }

Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> padding_idx)
    : num_(num), dim_(dim), padding_idx_(padding_idx) {
  EMBER_CHECK(num > 0 && dim > 0, "Embedding: sizes must be positive, got ", num, " x ", dim);
  if (padding_idx_) {
    if (*padding_idx_ < 0) *padding_idx_ += num;
    EMBER_CHECK(*padding_idx_ >= 0 && *padding_idx_ < num, "Embedding: padding_idx is out of range for ", num,
                " embeddings");
  }
  weight = register_parameter("weight", empty({num, dim}));
  normal_(weight);
  if (padding_idx_) {
    NoGradGuard no_grad;
    weight.select(0, *padding_idx_).zero_();
  }
}
std::string Embedding::name() const {
  return "Embedding(" + std::to_string(num_) + ", " + std::to_string(dim_) + ")";
}

std::string Flatten::name() const {
  return "Flatten(start_dim=" + std::to_string(start_) + ", end_dim=" + std::to_string(end_) + ")";
}

Checkpoint::Checkpoint(std::shared_ptr<Module> inner) : inner_(register_module("inner", std::move(inner))) {}

Tensor Checkpoint::forward(const Tensor& x) {
  std::vector<Tensor> inputs{x};
  for (const Tensor& p : inner_->parameters()) inputs.push_back(p);
  bool any = false;
  for (const Tensor& t : inputs) any = any || t.requires_grad();
  const MemoryScope scope(inner_.get());
  if (!grad_enabled() || !any) return inner_->forward(x);
  // The recompute repeats the forward's random draws and its autocast dtype.
  const Generator saved = default_generator();
  const std::optional<DType> autocast = autocast_dtype();
  Tensor y;
  {
    NoGradGuard no_grad;
    y = inner_->forward(x);
  }
  return custom_function("checkpoint", inputs, y,
                         [inner = inner_, x = x.detach(), needs_x = x.requires_grad(), saved, autocast,
                          n = inputs.size()](const Tensor& g) {
    Generator& gen = default_generator();
    const Generator after = gen;
    gen = saved;
    std::vector<Tensor> grads(n);
    {
      EnableGradGuard grad_on;
      std::optional<AutocastScope> autocast_on;
      if (autocast) autocast_on.emplace(*autocast);
      Tensor xi = needs_x ? x.detach().set_requires_grad() : x;
      const MemoryScope scope(inner.get());
      Tensor yi = inner->forward(xi);
      yi.backward(g);  // the parameters' gradients accumulate here
      if (needs_x) grads[0] = xi.grad();
    }
    gen = after;
    return grads;
  });
}

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}
void Sequential::push_back(std::shared_ptr<Module> m) { register_module(std::to_string(children().size()), std::move(m)); }
// Note [Fused activations]. A ReLU after a Linear or Conv2d costs a pass over their output
// in forward (read, write) and one in backward (read the gradient and the output, write),
// each as large as the layer's activations: in the Fashion-MNIST CNN, 12.8 MB per step
// for the first layer alone. Two fusions remove them, and change no value or gradient:
// - ReLU, MaxPool2d: max(relu(x)) = relu(max(x)) (a ReLU is monotonic), so the pool takes
//   the max of the raw input and applies the ReLU to its four times smaller output; its
//   backward masks the gradient at that size, where the maxima are (a window whose max is
//   not positive sends a zero gradient either way).
// - Linear or Conv2d, ReLU (not followed by a pool): the op applies max(0, .) while its
//   output is in cache, and its backward masks the incoming gradient.
// What the user sees is one autograd node instead of two.
Tensor Sequential::forward(const Tensor& x) {
  const auto& mods = children();
  auto is_relu = [&](size_t i) { return i < mods.size() && dynamic_cast<ReLU*>(mods[i].second.get()); };
  auto pool_at = [&](size_t i) { return i < mods.size() ? dynamic_cast<MaxPool2d*>(mods[i].second.get()) : nullptr; };
  Tensor y = x;
  for (size_t i = 0; i < mods.size(); ++i) {
    Module* m = mods[i].second.get();
    const MemoryScope scope(m);  // a fused pair is charged to its first module
    if (fuse_ && is_relu(i) && pool_at(i + 1)) {
      y = pool_at(i + 1)->forward(y, Activation::kReLU);
      ++i;
      continue;
    }
    if (fuse_ && is_relu(i + 1) && !pool_at(i + 2)) {
      if (auto* l = dynamic_cast<Linear*>(m)) {
        y = l->forward(y, Activation::kReLU);
        ++i;
        continue;
      }
      if (auto* c = dynamic_cast<Conv2d*>(m)) {
        y = c->forward(y, Activation::kReLU);
        ++i;
        continue;
      }
    }
    y = m->forward(y);
  }
  return y;
}

std::shared_ptr<Sequential> checkpoint_blocks(const Sequential& model) {
  std::vector<std::shared_ptr<Sequential>> blocks;
  bool has_params = false;  // the last block's; modules before the first with parameters join its block
  for (const auto& [name, m] : model.children()) {
    const bool params = !m->parameters().empty();
    if (blocks.empty() || (params && has_params)) {
      blocks.push_back(std::make_shared<Sequential>());
      has_params = false;
    }
    blocks.back()->push_back(m);
    has_params = has_params || params;
  }
  auto out = std::make_shared<Sequential>();
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (i + 1 < blocks.size()) out->push_back(std::make_shared<Checkpoint>(blocks[i]));
    else out->push_back(blocks[i]);
  }
  return out;
}

}  // namespace ember::nn
