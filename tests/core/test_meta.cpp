// The meta device (core/meta.h): ops give the shapes and dtypes they give on the test
// device and raise the same errors, autograd runs, nothing is allocated on a device with
// memory, and reading values is an error naming the op.
#include <gtest/gtest.h>

#include <string>

#include "core/meta.h"
#include "tests/core/reference.h"
#include "tests/device.h"

namespace ember {
namespace {

using test::error_message;

const Device kMeta = Device::meta();

int64_t allocated(Device d) { return memory_stats(d).at("allocated_bytes.all.current"); }

// An op on meta tensors and on the test device's: the same shape and dtype.
template <class Fn>
void expect_same_result(Fn&& fn, const std::vector<Tensor>& real) {
  std::vector<Tensor> meta;
  for (const Tensor& t : real) meta.push_back(t.to(kMeta));
  const Tensor a = fn(real), b = fn(meta);
  EXPECT_EQ(b.device(), kMeta);
  EXPECT_EQ(shape_str(b.shape()), shape_str(a.shape()));
  EXPECT_EQ(b.dtype(), a.dtype());
}

// The same error message on both.
template <class Fn>
void expect_same_error(Fn&& fn, const std::vector<Tensor>& real) {
  std::vector<Tensor> meta;
  for (const Tensor& t : real) meta.push_back(t.to(kMeta));
  EXPECT_EQ(error_message([&] { fn(meta); }), error_message([&] { fn(real); }));
}

TEST(Meta, DeviceParsesAndPrints) {
  EXPECT_EQ(Device::parse("meta"), kMeta);
  EXPECT_EQ(kMeta.str(), "meta");
  EXPECT_TRUE(kMeta.is_meta());
  EXPECT_NE(error_message([] { Device::parse("meta:1"); }).find("meta"), std::string::npos);
}

TEST(Meta, OpsGiveTheShapesAndDtypesOfTheTestDevice) {
  const Tensor a = randn({4, 6}), b = randn({6, 3}), v = randn({6});
  expect_same_result([](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); }, {a, b});
  expect_same_result([](const std::vector<Tensor>& t) { return add(t[0], t[1]); }, {a, v});
  expect_same_result([](const std::vector<Tensor>& t) { return sum(t[0], {1}); }, {a});
  expect_same_result([](const std::vector<Tensor>& t) { return softmax(t[0].to(kBFloat16), 1); }, {a});
  expect_same_result([](const std::vector<Tensor>& t) { return argmax(t[0], 1); }, {a});
  expect_same_result([](const std::vector<Tensor>& t) { return t[0].transpose(0, 1).contiguous(); }, {a});
  const Tensor img = randn({2, 3, 9, 9}), w = randn({5, 3, 3, 3});
  expect_same_result([](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], {}, {2, 2}, {1, 1}); }, {img, w});
  const Tensor target = zeros({4}, kInt64);
  expect_same_result([](const std::vector<Tensor>& t) { return cross_entropy(t[0], t[1]); }, {a, target});
}

TEST(Meta, OpsRaiseTheErrorsOfTheTestDevice) {
  const Tensor a = randn({4, 6}), b = randn({5, 3});
  expect_same_error([](const std::vector<Tensor>& t) { matmul(t[0], t[1]); }, {a, b});
  expect_same_error([](const std::vector<Tensor>& t) { add(t[0], t[1]); }, {a, b});
  expect_same_error([](const std::vector<Tensor>& t) { t[0].view({7}); }, {a});
  expect_same_error([](const std::vector<Tensor>& t) { cross_entropy(t[0], t[1]); }, {a, zeros({3}, kInt64)});
}

TEST(Meta, MixingMetaAndRealTensorsIsAnError) {
  const Tensor a = randn({2, 2});
  EXPECT_NE(error_message([&] { add(a, a.to(kMeta)); }).find("meta"), std::string::npos);
}

TEST(Meta, AutogradRecordsAndRunsBackward) {
  const Tensor w = randn({3, 5}, kMeta).requires_grad_();
  const Tensor x = randn({8, 5}, kMeta);
  Tensor loss = sum(relu(linear(x, w)));
  EXPECT_EQ(loss.grad_fn_name(), "sum");
  loss.backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().device(), kMeta);
  EXPECT_EQ(shape_str(w.grad().shape()), "[3, 5]");
}

TEST(Meta, NothingIsAllocatedOnDevicesWithMemory) {
  const Tensor probe = randn({2});  // the test device's allocator exists before counting
  const int64_t host = allocated(Device::cpu()), dev = allocated(test::test_device());
  const int64_t meta = allocated(kMeta);
  {
    const Tensor w = randn({256, 128}, kMeta).requires_grad_();
    Tensor y = gelu(linear(randn({64, 128}, kMeta), w));
    sum(y).backward();
    EXPECT_GT(allocated(kMeta), meta);  // the meta allocator counts what the ops would take
  }
  EXPECT_EQ(allocated(Device::cpu()), host);
  EXPECT_EQ(allocated(test::test_device()), dev);
  EXPECT_EQ(allocated(kMeta), meta);
}

TEST(Meta, ReadingValuesIsAnErrorNamingTheOp) {
  const Tensor m = ones({2, 3}, kMeta);
  EXPECT_EQ(error_message([&] { sum(m).item<double>(); }), "item: the tensor has no data: it is on the meta device");
  EXPECT_EQ(error_message([&] { m.to_vector<float>(); }), "to_vector: the tensor has no data: it is on the meta device");
  EXPECT_EQ(error_message([&] { m.to(test::test_device()); }),
            "to: cannot copy a tensor to " + test::test_device().str() + ": it has no data: it is on the meta device");
  EXPECT_EQ(error_message([&] { m.data_ptr(); }), "data_ptr: the tensor has no data: it is on the meta device");
  EXPECT_EQ(m.str(), "tensor(..., size=[2, 3], device='meta')");
}

TEST(Meta, ModulesMoveToMetaButNotBack) {
  nn::Linear l(4, 3);
  l.to(kMeta);
  for (const Tensor& p : l.parameters()) EXPECT_EQ(p.device(), kMeta);
  EXPECT_EQ(l(ones({2, 4}, kMeta)).device(), kMeta);
  EXPECT_NE(error_message([&] { l.to(Device::cpu()); }).find("meta device"), std::string::npos);
}

TEST(Meta, TheMetaAllocatorRoundsAsTheRealOnes) {
  const int64_t before = allocated(kMeta);
  const Tensor t = empty({1000}, {kFloat32, kMeta});  // 4000 bytes -> a 4096-byte block
  EXPECT_EQ(allocated(kMeta) - before, static_cast<int64_t>(device_allocator(test::test_device()).round_size(4000)));
}

TEST(Meta, RandomOpsAndIndexChecksAreNoOps) {
  EXPECT_EQ(shape_str(rand({3, 4}, kMeta).shape()), "[3, 4]");
  const Tensor logits = randn({4, 10}, kMeta), target = full({4}, 99, {kInt64, kMeta});
  EXPECT_EQ(cross_entropy(logits, target).device(), kMeta);  // no values to check against 10 classes
}

}  // namespace
}  // namespace ember
