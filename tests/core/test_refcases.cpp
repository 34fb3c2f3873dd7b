// PyTorch reference cases (../shared/refcases, copied under tests/refcases): the
// FORWARD values of elementwise ops and reductions, matmul and linear, softmax and
// log_softmax, conv2d and the 2-D poolings, each case checked against libtorch's output
// at the README's tolerances. test_refcase_grads.cpp checks the gradients of the same
// cases; the loss cases come with the losses.
//
// Each case runs under a SCOPED_TRACE naming file, case and op; each file counts the cases
// it checked and expects the number of applicable cases, so a file that fails to load,
// or an op name the dispatch does not know, cannot pass by checking nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "refcase_util.h"

namespace ember::test {
namespace {

using namespace refcase;  // NOLINT

TEST(Refcases, Elementwise) {
  RefFile f = load("elementwise.safetensors", 40);
  int64_t checked = 0;
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const json m = f.meta(i);
    SCOPED_TRACE(label(f, i, m));
    Tensor indices;
    Tensor got = elementwise_forward(m, operands_of(f, i), &indices);
    if (!got.defined()) {
      ADD_FAILURE() << "no dispatch for op " << m.at("op");
      continue;
    }
    if (f.has(i, "indices")) EXPECT_TRUE(same_indices(indices, f.field(i, "indices")));
    EXPECT_TRUE(matches(got, f.field(i, "out"), tol_for(m)));
    ++checked;
  }
  EXPECT_EQ(checked, 40);
}

TEST(Refcases, MatmulAndLinear) {
  RefFile f = load("matmul.safetensors", 17);
  int64_t checked = 0;
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const json m = f.meta(i);
    SCOPED_TRACE(label(f, i, m));
    if (m.at("op") == "linear") EXPECT_EQ(m.at("bias").get<bool>(), f.has(i, "bias"));
    Tensor got = matmul_forward(m, operands_of(f, i));
    if (!got.defined()) {
      ADD_FAILURE() << "no dispatch for op " << m.at("op");
      continue;
    }
    EXPECT_TRUE(matches(got, f.field(i, "out"), tol_for(m)));
    ++checked;
  }
  EXPECT_EQ(checked, 17);
}

TEST(Refcases, SoftmaxAndLogSoftmax) {
  RefFile f = load("softmax_loss.safetensors", 29);
  int64_t checked = 0, skipped = 0;
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const json m = f.meta(i);
    SCOPED_TRACE(label(f, i, m));
    if (is_loss(m)) {  // losses: not in core's ops yet
      ++skipped;
      continue;
    }
    Tensor got = softmax_forward(m, operands_of(f, i));
    if (!got.defined()) {
      ADD_FAILURE() << "no dispatch for op " << m.at("op");
      continue;
    }
    EXPECT_TRUE(matches(got, f.field(i, "out"), tol_for(m)));
    ++checked;
  }
  EXPECT_EQ(checked, 10);
  EXPECT_EQ(skipped, 19);
}

TEST(Refcases, Conv2d) {
  RefFile f = load("conv2d.safetensors", 11);
  int64_t checked = 0;
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const json m = f.meta(i);
    SCOPED_TRACE(label(f, i, m));
    ASSERT_EQ(m.value("padding_mode", "zeros"), "zeros");
    EXPECT_EQ(m.at("bias").get<bool>(), f.has(i, "bias"));
    Tensor got = conv2d_forward(m, operands_of(f, i));
    if (!got.defined()) {
      ADD_FAILURE() << "no dispatch for op " << m.at("op");
      continue;
    }
    EXPECT_TRUE(matches(got, f.field(i, "out"), tol_for(m)));
    ++checked;
  }
  EXPECT_EQ(checked, 11);
}

TEST(Refcases, Pool2d) {
  RefFile f = load("pool2d.safetensors", 13);
  int64_t checked = 0;
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const json m = f.meta(i);
    SCOPED_TRACE(label(f, i, m));
    const Operands a = operands_of(f, i);
    const Tensor& want = f.field(i, "out");
    Tensor indices;
    Tensor got = pool2d_forward(m, a, &indices);
    if (!got.defined()) {
      ADD_FAILURE() << "no dispatch for op " << m.at("op");
      continue;
    }
    EXPECT_TRUE(matches(got, want, tol_for(m)));
    if (m.at("op") == "max_pool2d") {
      EXPECT_TRUE(same_indices(indices, f.field(i, "indices")));
      EXPECT_TRUE(matches(max_pool2d(a.input, pool_options(m)), want, tol_for(m)));
    }
    ++checked;
  }
  EXPECT_EQ(checked, 13);
}

}  // namespace
}  // namespace ember::test
