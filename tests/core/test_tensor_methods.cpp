// Tensor's member forms of core's ops (x.relu(), x.sum({1}, true), ...): each gives what
// the free function gives, value for value, with its errors, so a libtorch user's
// spelling computes ember's op.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tests/core/reference.h"

namespace ember::test {
namespace {

using Op = std::function<Tensor(const Tensor&)>;

::testing::AssertionResult same(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return ::testing::AssertionFailure() << shape_str(a.shape()) << " vs " << shape_str(b.shape());
  if (a.dtype() != b.dtype()) return ::testing::AssertionFailure() << dtype_name(a.dtype()) << " vs " << dtype_name(b.dtype());
  if (a.device() != b.device()) return ::testing::AssertionFailure() << a.device().str() << " vs " << b.device().str();
  const std::vector<double> va = values(a), vb = values(b);
  for (size_t i = 0; i < va.size(); ++i)
    if (!(va[i] == vb[i] || (std::isnan(va[i]) && std::isnan(vb[i]))))
      return ::testing::AssertionFailure() << "element " << i << ": " << va[i] << " vs " << vb[i];
  return ::testing::AssertionSuccess();
}

TEST(TensorMethods, EachIsItsFreeFunction) {
  const Tensor x = random_tensor({3, 4}, kFloat32, Layout::Contiguous, 1);
  const Tensor y = random_tensor({3, 4}, kFloat32, Layout::Contiguous, 2);
  const Tensor pos = add(abs(x), Scalar(0.5));
  const Tensor idx = tensor({2, 0, 2}, kInt64);
  const Tensor gidx = tensor({0, 3, 1, 1, 2, 0}, {3, 2}, kInt64);
  const std::vector<std::pair<std::string, std::pair<Tensor, Tensor>>> cases = {
      {"add", {x.add(y), add(x, y)}},
      {"add scalar", {x.add(2), add(x, Scalar(2))}},
      {"sub", {x.sub(y), sub(x, y)}},
      {"sub scalar", {x.sub(1.5), sub(x, Scalar(1.5))}},
      {"mul", {x.mul(y), mul(x, y)}},
      {"mul scalar", {x.mul(3), mul(x, Scalar(3))}},
      {"div", {x.div(pos), div(x, pos)}},
      {"div scalar", {x.div(4), div(x, Scalar(4))}},
      {"pow", {pos.pow(y), pow(pos, y)}},
      {"pow scalar", {pos.pow(2.5), pow(pos, Scalar(2.5))}},
      {"maximum", {x.maximum(y), maximum(x, y)}},
      {"minimum", {x.minimum(y), minimum(x, y)}},
      {"neg", {x.neg(), neg(x)}},
      {"abs", {x.abs(), abs(x)}},
      {"exp", {x.exp(), exp(x)}},
      {"log", {pos.log(), log(pos)}},
      {"sqrt", {pos.sqrt(), sqrt(pos)}},
      {"rsqrt", {pos.rsqrt(), rsqrt(pos)}},
      {"relu", {x.relu(), relu(x)}},
      {"gelu", {x.gelu(), gelu(x)}},
      {"gelu tanh", {x.gelu(true), gelu(x, true)}},
      {"erf", {x.erf(), erf(x)}},
      {"tanh", {x.tanh(), tanh(x)}},
      {"sigmoid", {x.sigmoid(), sigmoid(x)}},
      {"clamp", {x.clamp(-0.5, 0.5), clamp(x, -0.5, 0.5)}},
      {"clamp min", {x.clamp(0.0, std::nullopt), clamp(x, 0.0, std::nullopt)}},
      {"eq", {x.eq(y), eq(x, y)}},
      {"eq scalar", {x.eq(0), eq(x, Scalar(0))}},
      {"ne", {x.ne(y), ne(x, y)}},
      {"ne scalar", {x.ne(0), ne(x, Scalar(0))}},
      {"lt", {x.lt(y), lt(x, y)}},
      {"lt scalar", {x.lt(0), lt(x, Scalar(0))}},
      {"le", {x.le(y), le(x, y)}},
      {"le scalar", {x.le(0), le(x, Scalar(0))}},
      {"gt", {x.gt(y), gt(x, y)}},
      {"gt scalar", {x.gt(0), gt(x, Scalar(0))}},
      {"ge", {x.ge(y), ge(x, y)}},
      {"ge scalar", {x.ge(0), ge(x, Scalar(0))}},
      {"sum", {x.sum(), sum(x)}},
      {"sum dims keepdim", {x.sum({1}, true), sum(x, {1}, true)}},
      {"sum all keepdim", {x.sum({}, true), sum(x, {}, true)}},
      {"mean", {x.mean({0}), mean(x, {0})}},
      {"amax", {x.amax({1}), amax(x, {1})}},
      {"amin", {x.amin({0, 1}, true), amin(x, {0, 1}, true)}},
      {"var", {x.var({1}, 0, true), var(x, {1}, 0, true)}},
      {"max", {x.max(), max(x)}},
      {"min", {x.min(), min(x)}},
      {"max dim values", {x.max(1).first, max(x, 1).first}},
      {"max dim indices", {x.max(1, true).second, max(x, 1, true).second}},
      {"min dim", {x.min(0).second, min(x, 0).second}},
      {"argmax", {x.argmax(), argmax(x)}},
      {"argmax dim", {x.argmax(1, true), argmax(x, 1, true)}},
      {"argmin dim", {x.argmin(0), argmin(x, 0)}},
      {"matmul", {x.matmul(y.t()), matmul(x, y.t())}},
      {"softmax", {x.softmax(1), softmax(x, 1)}},
      {"log_softmax", {x.log_softmax(0), log_softmax(x, 0)}},
      {"index_select", {x.index_select(0, idx), index_select(x, 0, idx)}},
      {"gather", {x.gather(1, gidx), gather(x, 1, gidx)}},
      {"scatter_add", {x.scatter_add(1, gidx, y.narrow(1, 0, 2)), scatter_add(x, 1, gidx, y.narrow(1, 0, 2))}},
  };
  for (const auto& [name, pair] : cases) EXPECT_TRUE(same(pair.first, pair.second)) << name;
  // sum({}, true) reduces every dim (there is no single-dim overload to catch the braces).
  EXPECT_EQ(x.sum({}, true).shape(), (Shape{1, 1}));
}

TEST(TensorMethods, ChainsAndRecordsGradients) {
  const Tensor w = random_tensor({4, 2}, kFloat64, Layout::Contiguous, 3).requires_grad_();
  const Tensor x = random_tensor({3, 4}, kFloat64, Layout::Contiguous, 4);
  const Tensor loss = x.matmul(w).relu().pow(2).sum().mul(0.5);
  loss.backward();
  const Tensor h = matmul(x, w.detach());
  const Tensor want = matmul(x.t(), mul(relu(h), gt(h, Scalar(0)).to(kFloat64)));  // d/dw of 0.5 |relu(x w)|^2
  EXPECT_TRUE(all_close(w.grad(), want, 1e-12, 1e-12));
}

TEST(TensorMethods, ShapesTypesAndDevicesOfOthers) {
  const Tensor x = iota({2, 6}, kFloat32);
  const Tensor like = empty({3, 4}, kFloat64);
  EXPECT_EQ(x.view_as(like).shape(), (Shape{3, 4}));
  EXPECT_TRUE(x.view_as(like).shares_storage_with(x));
  EXPECT_EQ(x.t().reshape_as(like).shape(), (Shape{3, 4}));
  EXPECT_EQ(x.type_as(like).dtype(), kFloat64);
  const Tensor other = empty({1}, {kFloat64, Device::cpu()});
  const Tensor moved = x.to(other);
  EXPECT_EQ(moved.dtype(), kFloat64);
  EXPECT_TRUE(moved.device().is_cpu());
  EXPECT_EQ(values(moved), values(x));
  const Tensor back = moved.to(x.device(), kBFloat16);
  EXPECT_EQ(back.dtype(), kBFloat16);
  EXPECT_EQ(back.device(), x.device());
  EXPECT_EQ(values(back), values(x));  // small integers are exact in bfloat16
  // The errors are the ops' own.
  EXPECT_EMBER_ERROR(x.matmul(like), "matmul", "[2, 6]", "[3, 4]");
  EXPECT_EMBER_ERROR(x.view_as(empty({5})), "view");
  EXPECT_EMBER_ERROR(x.softmax(2), "softmax");
}

}  // namespace
}  // namespace ember::test
