// Autograd, part 2: the engine (core/autograd.cpp). Accumulation across backward calls,
// retain_graph, implied and explicit output gradients, a tensor used twice, detach,
// NoGradGuard, the leaf rules, in-place writes into tensors that require grad,
// post-accumulate hooks, 10,000-op graphs (backward and teardown without recursion),
// integer operands, grad dtype / shape (mixed dtypes, broadcast leaves), and formulas
// that skip the gradients nobody needs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/storage.h"
#include "ember.h"
#include "tests/device.h"
#include "reference.h"

namespace ember::test {
namespace {

Tensor param(const std::vector<double>& v, const Shape& shape, DType dtype = kFloat64) {
  Tensor t = tensor(v, shape, dtype);
  t.requires_grad_();
  return t;
}
std::vector<double> scaled(const std::vector<double>& v, double k) {
  std::vector<double> out = v;
  for (double& e : out) e *= k;
  return out;
}

TEST(AutogradEngine, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = param({1, -2, 3}, {3});
  sum(x * 2.0).backward();
  EXPECT_CLOSE(x.grad(), scaled({1, 1, 1}, 2), Shape{3}, 0, 0);
  sum(x * x).backward();  // a second graph: + 2x
  EXPECT_CLOSE(x.grad(), std::vector<double>({4, -2, 8}), Shape{3}, 0, 1e-15);
  x.set_grad({});  // clearing starts over
  EXPECT_FALSE(x.grad().defined());
  sum(x * 3.0).backward();
  EXPECT_CLOSE(x.grad(), scaled({1, 1, 1}, 3), Shape{3}, 0, 0);
}

TEST(AutogradEngine, SecondBackwardNeedsRetainGraph) {
  Tensor x = param({1, 2}, {2});
  Tensor y = sum(x * x);
  y.backward();
  EXPECT_EMBER_ERROR(y.backward(), "backward", "retain_graph");
  EXPECT_TRUE(grad_enabled()) << "a failed backward must restore grad mode";
  EXPECT_CLOSE(x.grad(), std::vector<double>({2, 4}), Shape{2}, 0, 0);  // the failed call added nothing

  Tensor z = param({1, 2}, {2});
  Tensor w = sum(exp(z) * z);
  w.backward({}, /*retain_graph=*/true);
  w.backward({}, true);
  w.backward();  // the last one may free the graph
  std::vector<double> want;
  for (double v : {1.0, 2.0}) want.push_back(3 * std::exp(v) * (v + 1));
  EXPECT_CLOSE(z.grad(), want, Shape{2}, 1e-14, 0);
  EXPECT_EMBER_ERROR(w.backward(), "retain_graph");
}

TEST(AutogradEngine, BackwardFreesSavedTensorsUnlessRetained) {
  Tensor x = param({1, 2}, {2});
  for (bool retain : {false, true}) {
    SCOPED_TRACE(retain ? "retain_graph" : "no retain_graph");
    std::weak_ptr<Storage> saved;
    Tensor loss;
    {
      Tensor e = exp(x);  // exp saves its output for its backward
      saved = e.impl().storage;
      loss = sum(e * 2.0);
    }
    EXPECT_FALSE(saved.expired());
    loss.backward({}, retain);
    EXPECT_EQ(saved.expired(), !retain);
    loss = Tensor();  // dropping the graph frees what it kept
    EXPECT_TRUE(saved.expired());
  }
}

TEST(AutogradEngine, GradFnNames) {
  Tensor x = param({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ((x + x).grad_fn_name(), "add");
  EXPECT_EQ((1.0 - x).grad_fn_name(), "sub");
  EXPECT_EQ((2.0 / x).grad_fn_name(), "div");
  EXPECT_EQ(exp(x).grad_fn_name(), "exp");
  EXPECT_EQ(sum(x).grad_fn_name(), "sum");
  EXPECT_EQ(max(x, 1).first.grad_fn_name(), "max");
  EXPECT_EQ(softmax(x, 1).grad_fn_name(), "softmax");
  EXPECT_EQ(x.view({3, 2}).grad_fn_name(), "view");
  EXPECT_EQ(x.t().grad_fn_name(), "transpose");
  EXPECT_EQ(x.narrow(1, 0, 2).grad_fn_name(), "narrow");
  EXPECT_EQ(x.t().contiguous().grad_fn_name(), "clone");
  EXPECT_EQ(x.to(kFloat32).grad_fn_name(), "to");
  EXPECT_EQ(cat({x, x}).grad_fn_name(), "cat");
  EXPECT_EQ(x.reshape({3, 2}).grad_fn_name(), "reshape");  // the view path
  EXPECT_EQ(x.t().reshape({6}).grad_fn_name(), "view");     // the copy path: a view of a clone
  EXPECT_EQ(x.t().reshape({6}).is_contiguous(), true);
}

TEST(AutogradEngine, UnreachedLeavesAndEmptyTensors) {
  Tensor used = param({1, 2}, {2}), unused = param({3}, {1});
  int unused_calls = 0;
  unused.register_post_accumulate_grad_hook([&](const Tensor&) { ++unused_calls; });
  Tensor keep = unused * 2.0;  // in a graph, but not in the one backpropagated
  sum(used * 2.0).backward();
  EXPECT_EQ(unused_calls, 0);
  EXPECT_FALSE(unused.grad().defined());
  // Tensors with no elements: the grads are empty tensors of the leaves' shapes.
  Tensor e = param({}, {0, 3}), a = param({}, {2, 0}), b = param({}, {0, 3});
  sum(e * 2.0).backward();
  EXPECT_EQ(e.grad().shape(), Shape({0, 3}));
  Tensor prod = matmul(a, b);  // K = 0: a [2, 3] of zeros
  EXPECT_CLOSE(prod, std::vector<double>(6, 0.0), Shape({2, 3}), 0, 0);
  sum(prod).backward();
  EXPECT_EQ(a.grad().shape(), Shape({2, 0}));
  EXPECT_EQ(b.grad().shape(), Shape({0, 3}));
}

TEST(AutogradEngine, ImpliedAndExplicitOutputGradients) {
  Tensor x = param({1, 2, 3}, {3});
  Tensor y = x * 2.0;
  EXPECT_EMBER_ERROR(y.backward(), "backward", "[3]", "grad");  // non-scalar needs a grad
  EXPECT_EMBER_ERROR(y.backward(tensor({1, 2}, kFloat64)), "backward", "shape");
  y.backward(tensor({1, 10, 100}, kFloat64));
  EXPECT_CLOSE(x.grad(), std::vector<double>({2, 20, 200}), Shape{3}, 0, 0);

  // A one-element non-0-dim output gets an implied 1, and a leaf can be the root.
  Tensor s = param({5}, {1, 1});
  (s * 4.0).backward();
  EXPECT_CLOSE(s.grad(), std::vector<double>({4}), Shape({1, 1}), 0, 0);
  Tensor l = param({1, 2}, {2});
  l.backward(tensor({7, 8}, kFloat64));
  EXPECT_CLOSE(l.grad(), std::vector<double>({7, 8}), Shape{2}, 0, 0);

  // Backward from a tensor that does not require grad.
  EXPECT_EMBER_ERROR(sum(tensor({1, 2}, kFloat64)).backward(), "backward", "require");
}

// A leaf keeps the gradient buffer a formula made, when only the engine holds it, and
// copies any gradient somebody else can see: the caller's output gradient, one shared
// by two leaves (add passes the same tensor to both), or one saved by a retained graph.
TEST(AutogradEngine, LeafGradsNeverAliasVisibleTensors) {
  Tensor x = param({1, 2, 3}, {3}), y = param({4, 5, 6}, {3});
  Tensor g = tensor({1, 10, 100}, kFloat64);
  (x + y).backward(g);
  EXPECT_FALSE(x.grad().shares_storage_with(g));
  EXPECT_FALSE(y.grad().shares_storage_with(g));
  EXPECT_FALSE(x.grad().shares_storage_with(y.grad()));
  g.fill_(0);  // the caller reuses its buffer; the gradients keep their values
  x.grad().fill_(2);  // and writing one leaf's gradient leaves the other's alone
  EXPECT_CLOSE(x.grad(), std::vector<double>({2, 2, 2}), Shape{3}, 0, 0);
  EXPECT_CLOSE(y.grad(), std::vector<double>({1, 10, 100}), Shape{3}, 0, 0);

  Tensor l = param({1, 2}, {2});
  Tensor lg = tensor({7, 8}, kFloat64);
  l.backward(lg);  // a leaf as the root: its gradient is the caller's tensor
  EXPECT_FALSE(l.grad().shares_storage_with(lg));
}

TEST(AutogradEngine, TensorUsedTwiceGetsBothContributions) {
  Tensor x = param({1.5, -2, 0.25}, {3});
  sum(x * x).backward();
  EXPECT_CLOSE(x.grad(), std::vector<double>({3, -4, 0.5}), Shape{3}, 0, 0);
  Tensor y = param({1, 2}, {2});
  Tensor h = y * 3.0;  // an interior node used twice
  sum(h + h * h).backward();  // d/dy (3y + 9y^2) = 3 + 18y
  EXPECT_CLOSE(y.grad(), std::vector<double>({21, 39}), Shape{2}, 1e-15, 0);
}

TEST(AutogradEngine, DetachCutsTheGraph) {
  Tensor x = param({1, 2}, {2});
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_TRUE(d.shares_storage_with(x));
  EXPECT_FALSE((d * 3.0).requires_grad());
  Tensor y = x * 2.0;
  Tensor yd = y.detach();
  EXPECT_FALSE(yd.requires_grad());
  EXPECT_EQ(yd.grad_fn_name(), "");
  sum(x * 2.0 + x.detach() * x.detach() * 5.0 + yd).backward();
  EXPECT_CLOSE(x.grad(), std::vector<double>({2, 2}), Shape{2}, 0, 0);
}

TEST(AutogradEngine, NoGradGuardDisablesRecording) {
  Tensor x = param({1, 2}, {2});
  EXPECT_TRUE(grad_enabled());
  EXPECT_EQ((x * 2.0).grad_fn_name(), "mul");
  EXPECT_EQ(matmul(x, x).grad_fn_name(), "matmul");
  EXPECT_EQ(x.grad_fn_name(), "");
  {
    NoGradGuard guard;
    EXPECT_FALSE(grad_enabled());
    for (const Tensor& y : {x * 2.0, exp(x), x.view({2, 1}), x.narrow(0, 0, 1), sum(x), x.clone()}) {
      EXPECT_FALSE(y.requires_grad());
      EXPECT_EQ(y.grad_fn_name(), "");
      EXPECT_TRUE(y.is_leaf());
    }
    {
      NoGradGuard nested;
      EXPECT_FALSE(grad_enabled());
    }
    EXPECT_FALSE(grad_enabled());  // the inner guard restores "off", not "on"
  }
  EXPECT_TRUE(grad_enabled());
  EXPECT_TRUE((x * 2.0).requires_grad());
}

TEST(AutogradEngine, LeafRules) {
  Tensor x = param({1, 2}, {2});
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(x.grad().defined());
  Tensor y = x * 2.0;
  EXPECT_FALSE(y.is_leaf());
  EXPECT_EMBER_ERROR(y.requires_grad_(), "requires_grad_", "leaf", "mul");
  EXPECT_EMBER_ERROR(y.requires_grad_(false), "requires_grad_", "leaf");
  EXPECT_EMBER_ERROR(tensor({1, 2}, kInt64).requires_grad_(), "requires_grad_", "int64");
  EXPECT_EMBER_ERROR(tensor({1, 0}, kBool).requires_grad_(), "requires_grad_", "bool");
  EXPECT_NO_THROW(tensor({1, 2}, kInt32).requires_grad_(false));
  EXPECT_EMBER_ERROR(y.register_post_accumulate_grad_hook([](const Tensor&) {}), "register_post_accumulate_grad_hook");
  Tensor f = tensor({1, 2}, kFloat32);
  f.requires_grad_();
  EXPECT_TRUE(f.requires_grad());
  f.requires_grad_(false);
  EXPECT_FALSE(f.requires_grad());
  EXPECT_FALSE((f * 2.0).requires_grad());
  EXPECT_EMBER_ERROR(x.set_grad(zeros({3}, kFloat64)), "set_grad", "[3]");
}

TEST(AutogradEngine, InPlaceWritesIntoTensorsThatRequireGrad) {
  Tensor x = param({1, 2, 3}, {3});
  EXPECT_EMBER_ERROR(x.copy_(tensor({4, 5, 6}, kFloat64)), "copy_", "requires grad");
  EXPECT_EMBER_ERROR(x.fill_(0), "fill_", "requires grad");
  EXPECT_EMBER_ERROR(x.zero_(), "fill_");
  EXPECT_EMBER_ERROR(x.narrow(0, 0, 2).fill_(1), "fill_");  // a view that requires grad
  EXPECT_CLOSE(x, std::vector<double>({1, 2, 3}), Shape{3}, 0, 0);
  {
    NoGradGuard guard;  // how an optimizer updates parameters
    x.copy_(tensor({4, 5, 6}, kFloat64));
    EXPECT_CLOSE(x, std::vector<double>({4, 5, 6}), Shape{3}, 0, 0);
    x.narrow(0, 2, 1).fill_(7);
  }
  EXPECT_CLOSE(x, std::vector<double>({4, 5, 7}), Shape{3}, 0, 0);
  EXPECT_TRUE(x.requires_grad());
  EXPECT_TRUE(x.is_leaf());
  sum(x * x).backward();  // the graph sees the updated values
  EXPECT_CLOSE(x.grad(), std::vector<double>({8, 10, 14}), Shape{3}, 0, 0);
}

TEST(AutogradEngine, PostAccumulateHookSeesTheCompleteGradientOnce) {
  Tensor w = param({1, 2}, {2});
  int calls = 0;
  std::vector<double> seen;
  w.register_post_accumulate_grad_hook([&](const Tensor& l) {
    ++calls;
    EXPECT_TRUE(l.shares_storage_with(w));
    ASSERT_TRUE(l.grad().defined());
    seen = values(l.grad());
  });
  // w reaches the loss along three paths: 2w + w*w + exp(w).
  sum(w * 2.0 + w * w + exp(w)).backward();
  EXPECT_EQ(calls, 1);
  std::vector<double> want = {2 + 2 * 1 + std::exp(1.0), 2 + 2 * 2 + std::exp(2.0)};
  EXPECT_CLOSE(w.grad(), want, Shape{2}, 1e-15, 0);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_DOUBLE_EQ(seen[0], want[0]);
  EXPECT_DOUBLE_EQ(seen[1], want[1]);
  sum(w * 3.0).backward();  // once per backward; the hook sees the accumulated total
  EXPECT_EQ(calls, 2);
  EXPECT_DOUBLE_EQ(seen[0], want[0] + 3);
}

TEST(AutogradEngine, PostAccumulateHooksFireForEveryLeaf) {
  // A three-layer chain, as DDP's bucketing sees it: each parameter's hook fires once
  // per backward, after its gradient is final, whatever the order.
  std::vector<Tensor> params = {param({0.5, -1, 2, 0.25}, {2, 2}), param({1, 2, -1, 0.5}, {2, 2}),
                                param({-0.5, 1.5, 1, 1}, {2, 2})};
  Tensor bias = param({0.1, -0.2}, {2});
  std::vector<int> calls(4, 0);
  std::vector<std::vector<double>> at_hook(4);
  for (int i = 0; i < 4; ++i) {
    const Tensor& p = i < 3 ? params[i] : bias;
    p.register_post_accumulate_grad_hook([&, i](const Tensor& l) {
      ++calls[i];
      ASSERT_TRUE(l.grad().defined());
      at_hook[i] = values(l.grad());
    });
  }
  Tensor h = tensor({1, -1}, {1, 2}, kFloat64);
  for (int i = 0; i < 3; ++i) h = tanh(matmul(h, params[i]) + bias);  // bias feeds all three layers
  sum(h).backward();
  EXPECT_EQ(calls, std::vector<int>({1, 1, 1, 1}));
  for (int i = 0; i < 4; ++i) {  // what each hook saw is the final gradient
    SCOPED_TRACE("leaf " + std::to_string(i));
    EXPECT_CLOSE(i < 3 ? params[i].grad() : bias.grad(), at_hook[i], i < 3 ? Shape({2, 2}) : Shape{2}, 0, 0);
  }
}

TEST(AutogradEngine, DeepChainsBackwardAndTeardownWithoutRecursion) {
  constexpr int kDepth = 10000;
  {
    Tensor x = param({1, 2}, {2});
    Tensor y = x;
    for (int i = 0; i < kDepth; ++i) y = i % 2 ? y * 1.0001 : y + 1.0;
    sum(y).backward();
    const double g = std::pow(1.0001, kDepth / 2);
    EXPECT_CLOSE(x.grad(), std::vector<double>({g, g}), Shape{2}, 1e-10, 0);
  }  // y and its 10,000 nodes go here, after a backward that freed the saved state
  {
    Tensor x = param({1, 2}, {2});
    Tensor c = tensor({1.0001, 0.9999}, kFloat64);
    Tensor y = x;
    for (int i = 0; i < kDepth; ++i) y = (y * c).view({2, 1}).squeeze(1);  // saved tensors, views
    sum(y).backward({}, /*retain_graph=*/true);
    EXPECT_CLOSE(x.grad(), std::vector<double>({std::pow(1.0001, kDepth), std::pow(0.9999, kDepth)}), Shape{2},
                 1e-10, 0);
  }  // a retained graph of 30,000 nodes
  {
    // Never backpropagated, and deep enough (200,000 nodes) that a recursive teardown
    // would overflow an 8 MiB stack for certain; x is an input of every node.
    Tensor x = param({1}, {1});
    Tensor y = x;
    for (int i = 0; i < 20 * kDepth; ++i) y = i % 2 ? y + x : exp(y * 0.0);
    EXPECT_EQ(y.grad_fn_name(), "add");
  }
  SUCCEED();  // reaching here means no stack overflow
}

TEST(AutogradEngine, IntegerOperandsNeedNoGradient) {
  Tensor x = param({1, 2, 3}, {3});
  Tensor k = tensor({2, 3, 4}, kInt64);
  Tensor y = x * k + k;
  EXPECT_DTYPE(y, kFloat64);
  sum(y).backward();
  EXPECT_CLOSE(x.grad(), std::vector<double>({2, 3, 4}), Shape{3}, 0, 0);
  EXPECT_FALSE(k.grad().defined());
  EXPECT_FALSE(k.requires_grad());
  // Index operands (gather, index_select, scatter_add) and where's bool condition.
  Tensor idx = tensor({2, 0}, kInt64);
  Tensor z = sum(index_select(x, 0, idx)) + sum(where(gt(x, Scalar(1.5)), x, zeros({}, kFloat64)));
  z.backward();  // accumulates onto 2, 3, 4: index_select adds 1, 0, 1 and where 0, 1, 1
  EXPECT_CLOSE(x.grad(), std::vector<double>({3, 4, 6}), Shape{3}, 0, 0);
  EXPECT_FALSE(idx.grad().defined());
}

TEST(AutogradEngine, GradHasTheLeafsDtypeAndShape) {
  for (DType dt : {kFloat16, kBFloat16, kFloat32, kFloat64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = param({1, 2, 3, 4, 5, 6}, {2, 3}, dt);
    sum(x.t() * x.t()).backward();
    ASSERT_TRUE(x.grad().defined());
    EXPECT_DTYPE(x.grad(), dt);
    EXPECT_EQ(x.grad().shape(), x.shape());
    EXPECT_TRUE(x.grad().is_contiguous());
    EXPECT_FALSE(x.grad().requires_grad());
    EXPECT_CLOSE(x.grad(), std::vector<double>({2, 4, 6, 8, 10, 12}), Shape({2, 3}), 0, 0);
  }
}

TEST(AutogradEngine, MixedDtypeLeavesGetGradsInTheirOwnDtype) {
  Tensor a = param({1.5, 2, -3}, {3}, kFloat32);
  Tensor b = param({0.1, 0.2, 0.3}, {3}, kFloat64);
  Tensor y = a * b;
  EXPECT_DTYPE(y, kFloat64);
  sum(y).backward();
  EXPECT_DTYPE(a.grad(), kFloat32);
  EXPECT_DTYPE(b.grad(), kFloat64);
  EXPECT_CLOSE(a.grad(), values(tensor({0.1, 0.2, 0.3}, kFloat32)), Shape{3}, 0, 0);
  EXPECT_CLOSE(b.grad(), std::vector<double>({1.5, 2, -3}), Shape{3}, 0, 0);
  // matmul and cat across dtypes too.
  Tensor m = param({1, 2, 3, 4}, {2, 2}, kFloat32);
  Tensor n = param({1, 0, 0, 1}, {2, 2}, kFloat64);
  sum(cat({matmul(m, n), m}, 0)).backward();
  EXPECT_DTYPE(m.grad(), kFloat32);
  EXPECT_DTYPE(n.grad(), kFloat64);
  EXPECT_CLOSE(m.grad(), std::vector<double>({2, 2, 2, 2}), Shape({2, 2}), 0, 0);
  EXPECT_CLOSE(n.grad(), std::vector<double>({4, 4, 6, 6}), Shape({2, 2}), 0, 0);
}

TEST(AutogradEngine, BroadcastGradsAreSummedToTheLeafShape) {
  Tensor a = param({1, 2, 3}, {3, 1});
  Tensor b = param({10, 20, 30, 40}, {4});
  sum(a + b).backward();
  EXPECT_CLOSE(a.grad(), std::vector<double>({4, 4, 4}), Shape({3, 1}), 0, 0);
  EXPECT_CLOSE(b.grad(), std::vector<double>({3, 3, 3, 3}), Shape{4}, 0, 0);
  a.set_grad({});
  b.set_grad({});
  sum(a * b).backward();  // d/da = sum over b, d/db = sum over a
  EXPECT_CLOSE(a.grad(), std::vector<double>({100, 100, 100}), Shape({3, 1}), 0, 0);
  EXPECT_CLOSE(b.grad(), std::vector<double>({6, 6, 6, 6}), Shape{4}, 0, 0);
  Tensor s = param({2}, {});  // a 0-dim leaf against [3, 1]
  sum(a * s).backward();
  EXPECT_EQ(s.grad().shape(), Shape{});
  EXPECT_DOUBLE_EQ(s.grad().item<double>(), 6);
  Tensor one = param({5}, {1});  // [1] against [2, 3]
  sum(one.expand({2, 3}) * 2.0).backward();
  EXPECT_CLOSE(one.grad(), std::vector<double>({12}), Shape{1}, 0, 0);
}

// Formulas skip the gradients of inputs that need none (core/autograd_graph.h
// needs_input_grad): every subset of linear's, matmul's and conv2d's inputs that requires
// grad gets the same gradients as when all do, and the others get none.
TEST(AutogradEngine, OnlyInputsThatNeedGradientsGetThem) {
  const DeterministicConv deterministic;  // bit for bit between runs
  struct Op {
    const char* name;
    std::vector<Shape> shapes;
    std::function<Tensor(const std::vector<Tensor>&)> f;
  };
  const std::vector<Op> ops = {
      {"linear", {{5, 4}, {3, 4}, {3}}, [](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2]); }},
      {"matmul", {{2, 5, 4}, {4, 3}}, [](const std::vector<Tensor>& v) { return matmul(v[0], v[1]); }},
      {"conv2d", {{2, 3, 6, 5}, {4, 3, 3, 3}, {4}},
       [](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], {1, 1}, {1, 1}); }},
  };
  uint64_t seed = 40;
  for (const Op& op : ops) {
    std::vector<Tensor> base;
    for (const Shape& s : op.shapes) base.push_back(random_tensor(s, kFloat64, Layout::Contiguous, ++seed));
    const Tensor weights = random_tensor(op.f(base).shape(), kFloat64, Layout::Contiguous, ++seed);
    auto grads = [&](unsigned mask) {
      std::vector<Tensor> in;
      for (size_t i = 0; i < base.size(); ++i) {
        in.push_back(base[i].detach());
        if (mask >> i & 1) in.back().requires_grad_();
      }
      sum(op.f(in) * weights).backward();
      std::vector<Tensor> g;
      for (const Tensor& t : in) g.push_back(t.grad());
      return g;
    };
    const unsigned all = (1u << base.size()) - 1;
    const std::vector<Tensor> full = grads(all);
    for (unsigned mask = 1; mask < all; ++mask) {
      SCOPED_TRACE(std::string(op.name) + " mask " + std::to_string(mask));
      const std::vector<Tensor> g = grads(mask);
      for (size_t i = 0; i < base.size(); ++i) {
        if (mask >> i & 1) {
          EXPECT_CLOSE(g[i], values(full[i]), full[i].shape(), 0, 0);
        } else {
          EXPECT_FALSE(g[i].defined());
        }
      }
    }
  }
}

}  // namespace
}  // namespace ember::test
