// The multi-tensor optimizer steps (sgd_step_ / adam_step_ over a list, one fused kernel
// per device): on the CPU bit for bit the one-parameter steps the optimizers made before;
// on the test's device equal to the CPU's within rounding; parameters of awkward sizes
// (1, 3, 1000 elements, an empty one, more than one launch's list).
#include <gtest/gtest.h>

#include <vector>

#include "tests/core/fused_util.h"
#include "tests/core/reference.h"

namespace ember::test {
namespace {

std::vector<Tensor> make_list(const std::vector<int64_t>& sizes, DType dtype, uint64_t seed, Device dev) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Generator gen(seed + i);
    out.push_back(randn({sizes[i]}, {kFloat64, Device::cpu()}, &gen).to(dtype).to(dev));
  }
  return out;
}

std::vector<Tensor> clones(const std::vector<Tensor>& ts, Device dev) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.to(dev).clone());
  return out;
}

// 120 parameters: more than one CUDA launch holds (95 for SGD, 79 for Adam).
std::vector<int64_t> awkward_sizes() {
  std::vector<int64_t> s{1, 3, 1000, 0, 4097};
  for (int i = 0; i < 115; ++i) s.push_back(1 + (i * 37) % 300);
  return s;
}

TEST(MultiTensor, AdamEqualsOneParameterStepsAndTheCpu) {
  for (bool decoupled : {false, true}) {
    const Device cpu = Device::cpu(), dev = test_device();
    const std::vector<int64_t> sizes = awkward_sizes();
    const std::vector<Tensor> p0 = make_list(sizes, kFloat32, 1, cpu), g = make_list(sizes, kFloat32, 1000, cpu);
    std::vector<Tensor> p_single = clones(p0, cpu), p_multi = clones(p0, cpu), p_dev = clones(p0, dev);
    auto zeros_of = [](const std::vector<Tensor>& ps) {
      std::vector<Tensor> z;
      for (const Tensor& p : ps) z.push_back(zeros(p.shape(), {p.dtype(), p.device()}));
      return z;
    };
    std::vector<Tensor> m1 = zeros_of(p0), v1 = zeros_of(p0), m2 = zeros_of(p0), v2 = zeros_of(p0);
    std::vector<Tensor> md = zeros_of(p_dev), vd = zeros_of(p_dev);
    const std::vector<Tensor> g_dev = clones(g, dev);
    for (int64_t step = 1; step <= 3; ++step) {
      AdamStepOptions o{.lr = 1e-2, .weight_decay = 0.1, .decoupled_weight_decay = decoupled, .step = step};
      for (size_t i = 0; i < p0.size(); ++i) adam_step_(p_single[i], g[i], m1[i], v1[i], o);
      adam_step_(p_multi, g, m2, v2, o);
      adam_step_(p_dev, g_dev, md, vd, o);
    }
    for (size_t i = 0; i < p0.size(); ++i) {
      ASSERT_EQ(p_multi[i].to_vector<float>(), p_single[i].to_vector<float>()) << "parameter " << i;
      ASSERT_EQ(v2[i].to_vector<float>(), v1[i].to_vector<float>()) << "parameter " << i;
      // The same functor on both devices; a compiler may contract differently: a few ulp of lr.
      ASSERT_TRUE(all_close(p_dev[i], p_multi[i].to_vector<double>(), p0[i].shape(), 1e-6, 1e-7)) << "parameter " << i;
    }
  }
}

TEST(MultiTensor, SgdEqualsOneParameterStepsAndTheCpu) {
  for (double momentum : {0.0, 0.9}) {
    const Device cpu = Device::cpu(), dev = test_device();
    const std::vector<int64_t> sizes = awkward_sizes();
    const std::vector<Tensor> p0 = make_list(sizes, kFloat64, 3, cpu), g = make_list(sizes, kFloat64, 2000, cpu);
    std::vector<Tensor> p_single = clones(p0, cpu), p_multi = clones(p0, cpu), p_dev = clones(p0, dev);
    std::vector<Tensor> b1, b2, bd;
    for (const Tensor& p : p0) {
      b1.push_back(momentum != 0 ? zeros_like(p) : Tensor());
      b2.push_back(momentum != 0 ? zeros_like(p) : Tensor());
      bd.push_back(momentum != 0 ? zeros(p.shape(), {p.dtype(), dev}) : Tensor());
    }
    const std::vector<Tensor> g_dev = clones(g, dev);
    for (int step = 0; step < 3; ++step) {
      SgdStepOptions o{.lr = 0.1, .momentum = momentum, .weight_decay = 0.01, .nesterov = momentum != 0};
      for (size_t i = 0; i < p0.size(); ++i) sgd_step_(p_single[i], g[i], b1[i], o, step == 0);
      sgd_step_(p_multi, g, b2, o, step == 0);
      sgd_step_(p_dev, g_dev, bd, o, step == 0);
    }
    for (size_t i = 0; i < p0.size(); ++i) {
      ASSERT_EQ(p_multi[i].to_vector<double>(), p_single[i].to_vector<double>()) << "parameter " << i;
      ASSERT_TRUE(all_close(p_dev[i], p_multi[i].to_vector<double>(), p0[i].shape(), 1e-14, 1e-15)) << "parameter " << i;
    }
  }
}

TEST(MultiTensor, ChecksTheLists) {
  const std::vector<Tensor> p = make_list({3, 4}, kFloat32, 1, test_device());
  const std::vector<Tensor> g = make_list({3}, kFloat32, 2, test_device());
  EXPECT_THROW(sgd_step_(p, g, {Tensor(), Tensor()}, SgdStepOptions{}, false), Error);
  const std::vector<Tensor> wrong = make_list({3, 5}, kFloat32, 2, test_device());
  try {
    adam_step_(p, wrong, wrong, wrong, AdamStepOptions{});
    FAIL() << "expected an ember::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("adam_step_: grad must be a contiguous float32 tensor of shape [4]"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ember::test
