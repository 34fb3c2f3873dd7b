// PyTorch reference cases, GRADIENTS: for every case of elementwise, matmul, softmax /
// log_softmax, conv2d and pool2d, the operands present (input, other, weight, bias)
// become fresh leaves that require grad, the case's op runs through the same dispatch
// as the forward test (refcase_util.h), out.backward(grad_out) runs, and each grad_<x>
// in the file is compared with the leaf's grad() at the README's tolerances (dtype and
// shape included: broadcast operands get grads summed back to their own shape).
//
// Each file counts the cases and the gradients it checked and expects the numbers the
// file holds, so a dispatch gap or a missing field cannot pass by checking nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>

#include "refcase_util.h"

namespace ember::test {
namespace {

using namespace refcase;  // NOLINT

struct Counts {
  int64_t cases = 0, grads = 0;
};

using Forward = std::function<Tensor(const json&, const Operands&)>;

// Runs one case's backward and compares its gradients; false when the op has no dispatch.
bool check_case_grads(const RefFile& f, int64_t i, const json& m, const Forward& forward, Counts& counts) {
  Operands leaves;
  for (const char* n : kOperandNames) {
    if (!f.has(i, n)) continue;
    Tensor t = f.field(i, n).clone();  // a fresh leaf: the file's tensors stay untouched
    t.requires_grad_();
    operand(leaves, n) = t;
  }
  Tensor out = forward(m, leaves);
  if (!out.defined()) return false;
  EXPECT_TRUE(out.requires_grad());
  EXPECT_EQ(out.shape(), f.field(i, "grad_out").shape());
  EXPECT_NO_THROW(out.backward(f.field(i, "grad_out")));
  int64_t grads_here = 0;
  for (const char* n : kOperandNames) {
    const std::string g = std::string("grad_") + n;
    if (!f.has(i, g)) continue;
    const Tensor& leaf = operand(leaves, n);
    EXPECT_TRUE(leaf.defined()) << g << " present but the operand is not";
    if (!leaf.defined()) continue;
    SCOPED_TRACE(g);
    EXPECT_TRUE(leaf.grad().defined()) << "backward left " << n << ".grad() undefined";
    if (leaf.grad().defined()) EXPECT_TRUE(matches(leaf.grad(), f.field(i, g), tol_for(m)));
    ++grads_here;
  }
  EXPECT_GE(grads_here, 1) << "a case without any grad_<x> field";
  ++counts.cases;
  counts.grads += grads_here;
  return true;
}

void run_file(const RefFile& f, const Forward& forward, Counts& counts, const std::function<bool(const json&)>& skip = {}) {
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const json m = f.meta(i);
    if (skip && skip(m)) continue;
    SCOPED_TRACE(label(f, i, m));
    if (!check_case_grads(f, i, m, forward, counts)) ADD_FAILURE() << "no dispatch for op " << m.at("op");
  }
}

TEST(RefcaseGrads, Elementwise) {
  RefFile f = load("elementwise.safetensors", 40);
  Counts c;
  run_file(f, [](const json& m, const Operands& a) { return elementwise_forward(m, a); }, c);
  EXPECT_EQ(c.cases, 40);
  EXPECT_EQ(c.grads, 40 + 9);  // 9 binary cases also have grad_other
}

TEST(RefcaseGrads, MatmulAndLinear) {
  RefFile f = load("matmul.safetensors", 17);
  Counts c;
  run_file(f, matmul_forward, c);
  EXPECT_EQ(c.cases, 17);
  // 13 matmul cases: input + other; 4 linear cases: input + weight (+ bias on 3 of them).
  EXPECT_EQ(c.grads, 13 * 2 + 4 * 2 + 3);
}

TEST(RefcaseGrads, SoftmaxAndLogSoftmax) {
  RefFile f = load("softmax_loss.safetensors", 29);
  Counts c;
  run_file(f, softmax_forward, c, is_loss);
  EXPECT_EQ(c.cases, 10);
  EXPECT_EQ(c.grads, 10);
}

TEST(RefcaseGrads, Conv2d) {
  RefFile f = load("conv2d.safetensors", 11);
  Counts c;
  run_file(f, conv2d_forward, c);
  EXPECT_EQ(c.cases, 11);
  EXPECT_EQ(c.grads, 11 * 2 + 9);  // input and weight everywhere, bias on 9 cases
}

TEST(RefcaseGrads, Pool2d) {
  RefFile f = load("pool2d.safetensors", 13);
  Counts c;
  run_file(f, [](const json& m, const Operands& a) { return pool2d_forward(m, a); }, c);
  EXPECT_EQ(c.cases, 13);
  EXPECT_EQ(c.grads, 13);
}

}  // namespace
}  // namespace ember::test
