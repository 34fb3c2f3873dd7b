// The recurrent layers' CUDA variants (kernels/cuda/variants.h, EMBER_RNN) on the GPU
// (label `gpu`; the emulated device in the EMULATED build, which has the hand-written
// variant only; skipped where there is no CUDA device): nn::LSTM, GRU and RNN (tanh,
// relu) with 2 layers, bidirectional and batch_first, in float32 under cuDNN's RNN API and
// under the hand-written loop, each against the same model in float64 on the CPU, for the
// outputs and every gradient (input, initial states, each weight and bias), and the two
// variants against each other. Every comparison prints its largest error beside its
// tolerance. On a real GPU a last test prints the LSTM of word_language_model ([35, 20,
// 200], 2 layers of 200) forward + backward under each variant.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/device_runtime.h"
#include "ember.h"
#include "kernels/cuda/variants.h"
#include "tests/core/reference.h"

namespace ember {
namespace {

bool have_gpu() { return kernels::cuda_backend_built() && kernels::cuda_device_count() > 0; }

#define REQUIRE_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device (or a CPU-only build)"

// The variants this build has: the hand-written loop always, cuDNN where the build has it
// (set_rnn_variant("cudnn") is an ember::Error otherwise, as in emulation).
std::vector<std::string> variants() {
  std::vector<std::string> v{"handwritten"};
  try {
    kernels::cuda::set_rnn_variant("cudnn");
    v.push_back("cudnn");
  } catch (const Error&) {
  }
  kernels::cuda::set_rnn_variant("auto");
  return v;
}

// Restores EMBER_RNN's starting choice however the test ends.
struct VariantGuard {
  std::string saved = kernels::cuda::rnn_variant();
  ~VariantGuard() { kernels::cuda::set_rnn_variant(saved); }
};

enum class Kind { kLstm, kGru, kTanh, kRelu };
const char* kind_name(Kind k) {
  return k == Kind::kLstm ? "LSTM" : k == Kind::kGru ? "GRU" : k == Kind::kTanh ? "RNN tanh" : "RNN relu";
}

// The model's outputs and the gradients of a loss that weighs each output element by
// its own random factor (so every element's gradient differs), in float64 on the CPU.
struct Result {
  std::vector<std::pair<std::string, std::vector<double>>> values;  // name, values
};

struct Case {
  Kind kind;
  int64_t T = 7, B = 5, I = 6, H = 9, L = 2;
};

// Runs the model of `c` with the CPU float64 model's parameters `params`, on `device` in
// `dtype`: forward on x [B, T, I] (batch_first), h0 (and c0), then backward of the
// weighted loss; returns every output and gradient as float64 values.
Result run(const Case& c, const NamedTensors& params, const std::vector<Tensor>& data, Device device, DType dtype) {
  const nn::RNNOptions o{
      .num_layers = c.L,
      .nonlinearity = c.kind == Kind::kRelu ? nn::RNNNonlinearity::kReLU : nn::RNNNonlinearity::kTanh,
      .batch_first = true,
      .bidirectional = true};
  std::shared_ptr<nn::Module> m;
  if (c.kind == Kind::kLstm) m = std::make_shared<nn::LSTM>(c.I, c.H, o);
  else if (c.kind == Kind::kGru) m = std::make_shared<nn::GRU>(c.I, c.H, o);
  else m = std::make_shared<nn::RNN>(c.I, c.H, o);
  m->to(dtype);
  m->to(device);
  NamedTensors state;
  for (const auto& [name, t] : params) state.emplace_back(name, t.to(dtype).to(device));
  m->load_state_dict(state);
  auto on = [&](const Tensor& t) {
    Tensor u = t.to(dtype).to(device);
    u.requires_grad_();
    return u;
  };
  const Tensor x = on(data[0]), h0 = on(data[1]), c0 = on(data[2]);
  Tensor out, hn, cn;
  if (c.kind == Kind::kLstm) {
    auto [y, hc] = (*std::static_pointer_cast<nn::LSTM>(m))(x, std::make_tuple(h0, c0));
    out = y, hn = std::get<0>(hc), cn = std::get<1>(hc);
  } else if (c.kind == Kind::kGru) {
    std::tie(out, hn) = (*std::static_pointer_cast<nn::GRU>(m))(x, h0);
  } else {
    std::tie(out, hn) = (*std::static_pointer_cast<nn::RNN>(m))(x, h0);
  }
  Tensor loss = sum(mul(out, data[3].to(dtype).to(device))) + sum(mul(hn, data[4].to(dtype).to(device)));
  if (cn.defined()) loss = loss + sum(mul(cn, data[5].to(dtype).to(device)));
  loss.backward();
  Result r;
  auto put = [&](const std::string& name, const Tensor& t) { r.values.emplace_back(name, test::values(t)); };
  put("output", out);
  put("h_n", hn);
  if (cn.defined()) put("c_n", cn);
  put("grad input", x.grad());
  put("grad h0", h0.grad());
  if (cn.defined()) put("grad c0", c0.grad());
  for (const auto& [name, p] : m->named_parameters()) put("grad " + name, p.grad());
  return r;
}

// The largest |a - b| over max(1, |b|) of two lists of values.
double max_rel_error(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::fabs(a[i] - b[i]) / std::max(1.0, std::fabs(b[i])));
  return worst;
}

// The float32 tolerance, relative to max(1, |reference|): each value is a chain of dot
// products through T steps of L layers, each of I + 2 H + 2 terms (input, recurrent,
// biases; the second layer's input is 2 H), and the weight gradients add T B products
// more; each sum carries gamma_n = n u of its terms' magnitude (u = 2^-24), which the
// weights' scale (|W| <= 1/sqrt(H), PyTorch's init) keeps at the order of the result, and
// the activations are at most 1-Lipschitz. 4x margin for the pointwise math's roundings.
double float32_tolerance(const Case& c) {
  const double terms = double(c.L) * c.T * (c.I + 2 * c.H + 2) + double(c.T) * c.B;
  return 4 * terms * 0x1p-24;
}

TEST(RnnVariantsOnGpu, EveryCellMatchesAFloat64CpuReference) {
  REQUIRE_GPU();
  const VariantGuard guard;
  const std::vector<std::string> names = variants();
  std::printf("rnn variants in this build: %s%s\n", names[0].c_str(), names.size() > 1 ? ", cudnn" : "");
  for (const Kind kind : {Kind::kLstm, Kind::kGru, Kind::kTanh, Kind::kRelu}) {
    const Case c{kind};
    const int64_t D = 2;
    // The model's parameters (PyTorch's init, seeded) and the data, float32 values, which
    // the float64 reference takes exactly.
    manual_seed(7);
    const nn::RNNOptions o{
        .num_layers = c.L,
        .nonlinearity = kind == Kind::kRelu ? nn::RNNNonlinearity::kReLU : nn::RNNNonlinearity::kTanh,
        .batch_first = true,
        .bidirectional = true};
    std::shared_ptr<nn::Module> ref_model;
    if (kind == Kind::kLstm) ref_model = std::make_shared<nn::LSTM>(c.I, c.H, o);
    else if (kind == Kind::kGru) ref_model = std::make_shared<nn::GRU>(c.I, c.H, o);
    else ref_model = std::make_shared<nn::RNN>(c.I, c.H, o);
    const NamedTensors params = ref_model->named_parameters();
    std::vector<Tensor> data;
    for (const Shape& s : {Shape{c.B, c.T, c.I}, Shape{c.L * D, c.B, c.H}, Shape{c.L * D, c.B, c.H},
                           Shape{c.B, c.T, D * c.H}, Shape{c.L * D, c.B, c.H}, Shape{c.L * D, c.B, c.H}})
      data.push_back(test::random_tensor(s, kFloat32, test::Layout::Contiguous, 100 + data.size()).to(Device::cpu()));
    const Result ref = run(c, params, data, Device::cpu(), kFloat64);
    const double tol = float32_tolerance(c);
    std::vector<Result> got;
    for (const std::string& v : names) {
      kernels::cuda::set_rnn_variant(v);
      try {  // an error in one variant or cell is reported, and the others still run
        got.push_back(run(c, params, data, Device::cuda(0), kFloat32));
      } catch (const Error& e) {
        std::printf("%-8s %-11s FAILED with an error: %s\n", kind_name(kind), v.c_str(), e.what());
        ADD_FAILURE() << kind_name(kind) << " " << v << ": " << e.what();
        continue;
      }
      for (size_t i = 0; i < ref.values.size(); ++i) {
        const auto& [what, want] = ref.values[i];
        const double err = max_rel_error(got.back().values[i].second, want);
        std::printf("%-8s %-11s %-26s max error %.3g (tolerance %.3g)%s\n", kind_name(kind), v.c_str(), what.c_str(),
                    err, tol, err <= tol ? "" : "  FAILED");
        EXPECT_LE(err, tol) << kind_name(kind) << " " << v << " " << what;
      }
    }
    if (got.size() == 2 && names.size() == 2)
      for (size_t i = 0; i < ref.values.size(); ++i) {
        const double err = max_rel_error(got[1].values[i].second, got[0].values[i].second);
        std::printf("%-8s cudnn vs handwritten %-26s max difference %.3g (tolerance %.3g)%s\n", kind_name(kind),
                    ref.values[i].first.c_str(), err, 2 * tol, err <= 2 * tol ? "" : "  FAILED");
        EXPECT_LE(err, 2 * tol) << kind_name(kind) << " cudnn vs handwritten " << ref.values[i].first;
      }
  }
}

// Names other than auto, cudnn and handwritten are refused; a backward under another
// variant than its forward is an error, not a wrong gradient (the reserve is the forward
// variant's: cuDNN's opaque space or the hand-written loop's activations).
TEST(RnnVariantsOnGpu, BadNamesAndAVariantChangedBeforeBackwardAreErrors) {
  REQUIRE_GPU();
  const VariantGuard guard;
  EXPECT_TRUE(test::contains(test::error_of([] { kernels::cuda::set_rnn_variant("fast"); }),
                             "expected auto, cudnn or handwritten"));
  if (variants().size() < 2) GTEST_SKIP() << "one variant in this build (no cuDNN): nothing to mix";
  nn::GRU gru(3, 4);
  gru.to(Device::cuda(0));
  const Tensor x = randn({5, 2, 3}, {kFloat32, Device::cuda(0)});
  kernels::cuda::set_rnn_variant("cudnn");
  const Tensor y = std::get<0>(gru(x));
  kernels::cuda::set_rnn_variant("handwritten");
  EXPECT_TRUE(test::contains(test::error_of([&] { sum(y).backward(); }), "changed between forward and backward"));
}

// The LSTM of word_language_model ([35, 20, 200] input, 2 layers of 200, dropout 0.2):
// milliseconds per forward + backward under each variant, timed from the host after a
// device synchronize (median of 20 after 3 warm-up runs). Printed, never asserted.
TEST(RnnVariantsOnGpu, WordLanguageModelLstmTiming) {
  REQUIRE_GPU();
#if defined(EMBER_CUDA_EMULATED)
  GTEST_SKIP() << "timing means nothing on the emulated device";
#endif
  const VariantGuard guard;
  manual_seed(1);
  nn::LSTM lstm(200, 200, {.num_layers = 2, .dropout = 0.2});
  lstm.to(Device::cuda(0));
  const Tensor x = randn({35, 20, 200}, {kFloat32, Device::cuda(0)});
  for (const std::string& v : variants()) {
    kernels::cuda::set_rnn_variant(v);
    std::vector<double> ms;
    try {
      for (int i = 0; i < 23; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        sum(std::get<0>(lstm(x))).backward();
        synchronize(Device::cuda(0));
        const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (i >= 3) ms.push_back(t);
      }
    } catch (const Error& e) {
      ADD_FAILURE() << "LSTM wlm under " << v << ": " << e.what();
      continue;
    }
    std::sort(ms.begin(), ms.end());
    std::printf("LSTM wlm [35, 20, 200] x2 layers fwd+bwd, %s: %.3f ms (median of 20)\n", v.c_str(), ms[ms.size() / 2]);
  }
}

}  // namespace
}  // namespace ember
