// PyTorch reference cases (../shared/refcases, copied under tests/data/refcases): the
// FORWARD values of elementwise ops and reductions, matmul and linear, softmax and
// log_softmax, conv2d and the 2-D poolings, each case checked against libtorch's output
// at the README's tolerances. Gradients and the loss cases come with autograd.
//
// Each case runs under a SCOPED_TRACE naming file, case and op; each file counts the cases
// it checked and expects the number of applicable cases, so a file that fails to load,
// or an op name the dispatch does not know, cannot pass by checking nothing.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ember.h"
#include "reference.h"

#ifndef EMBER_REFCASES_DIR  // the build defines it; this fallback suits a run from the source root
#define EMBER_REFCASES_DIR "tests/data/refcases"
#endif

namespace ember::test {
namespace {

using nlohmann::json;
using Pair = std::pair<int64_t, int64_t>;

struct RefFile {
  std::string name;
  SafetensorsFile st;
  int64_t num_cases = 0;

  json meta(int64_t i) const { return json::parse(st.metadata.at("case" + std::to_string(i))); }
  const Tensor& field(int64_t i, const std::string& f) const { return st.at("case" + std::to_string(i) + "." + f); }
  bool has(int64_t i, const std::string& f) const { return st.contains("case" + std::to_string(i) + "." + f); }
};

RefFile load(const std::string& name, int64_t expected_cases) {
  RefFile r;
  r.name = name;
  r.st = load_safetensors(std::string(EMBER_REFCASES_DIR) + "/" + name);
  r.num_cases = std::stoll(r.st.metadata.at("num_cases"));
  EXPECT_EQ(r.num_cases, expected_cases) << name << ": the file changed; update the expected counts";
  return r;
}

// README: F64 atol 1e-10, rtol 1e-8; F32 atol 1e-4 (or 10x the case's measured float32
// error when that is larger), rtol 1e-4.
struct Tol {
  double rtol, atol;
};
Tol tol_for(const json& m) {
  if (m.at("dtype") == "F64") return {1e-8, 1e-10};
  return {1e-4, std::max(1e-4, 10 * m.value("f32_vs_f64_max_abs_diff", 0.0))};
}

// Compares one output with the reference tensor, dtype included.
::testing::AssertionResult matches(const Tensor& got, const Tensor& want, Tol t) {
  if (got.defined() && got.dtype() != want.dtype()) {
    return ::testing::AssertionFailure() << "dtype " << dtype_name(got.dtype()) << ", want " << dtype_name(want.dtype());
  }
  return all_close(got, want, t.rtol, t.atol);
}
::testing::AssertionResult same_indices(const Tensor& got, const Tensor& want) {
  if (got.dtype() != kInt64) return ::testing::AssertionFailure() << "indices dtype " << dtype_name(got.dtype());
  if (got.shape() != want.shape()) {
    return ::testing::AssertionFailure() << "indices shape " << shape_str(got.shape()) << " != " << shape_str(want.shape());
  }
  std::vector<int64_t> g = got.to_vector<int64_t>(), w = want.to_vector<int64_t>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i] != w[i]) {
      return ::testing::AssertionFailure() << "index at flat " << i << ": got " << g[i] << ", want " << w[i];
    }
  }
  return ::testing::AssertionSuccess();
}

std::string label(const RefFile& f, int64_t i, const json& m) {
  return f.name + " case" + std::to_string(i) + " (" + m.at("op").get<std::string>() + ", " +
         m.at("dtype").get<std::string>() + ")";
}
std::vector<int64_t> dims_of(const json& m) {  // null: all dims
  return m.at("dim").is_null() ? std::vector<int64_t>{} : m.at("dim").get<std::vector<int64_t>>();
}
Pair pair_of(const json& v) {
  std::vector<int64_t> p = v.get<std::vector<int64_t>>();
  return {p.at(0), p.at(1)};
}

TEST(Refcases, Elementwise) {
  RefFile f = load("elementwise.safetensors", 40);
  int64_t checked = 0;
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const json m = f.meta(i);
    const std::string op = m.at("op");
    SCOPED_TRACE(label(f, i, m));
    const Tensor& x = f.field(i, "input");
    const Tensor& want = f.field(i, "out");
    const Tol t = tol_for(m);
    Tensor got;
    if (op == "add") got = add(x, f.field(i, "other"));
    else if (op == "sub") got = sub(x, f.field(i, "other"));
    else if (op == "mul") got = mul(x, f.field(i, "other"));
    else if (op == "div") got = div(x, f.field(i, "other"));
    else if (op == "exp") got = exp(x);
    else if (op == "log") got = log(x);
    else if (op == "tanh") got = tanh(x);
    else if (op == "sigmoid") got = sigmoid(x);
    else if (op == "relu") got = relu(x);
    else if (op == "gelu") got = gelu(x, m.at("approximate") == "tanh");
    else if (op == "sum") got = sum(x, dims_of(m), m.at("keepdim").get<bool>());
    else if (op == "mean") got = mean(x, dims_of(m), m.at("keepdim").get<bool>());
    else if (op == "var") got = var(x, dims_of(m), m.at("correction").get<int64_t>(), m.at("keepdim").get<bool>());
    else if (op == "max" && m.at("dim").is_null()) got = max(x);
    else if (op == "max") {
      std::vector<int64_t> dims = dims_of(m);
      ASSERT_EQ(dims.size(), 1u);
      auto [values_got, indices_got] = max(x, dims[0], m.at("keepdim").get<bool>());
      EXPECT_TRUE(same_indices(indices_got, f.field(i, "indices")));
      got = values_got;
    } else {
      ADD_FAILURE() << "no dispatch for op " << op;
      continue;
    }
    EXPECT_TRUE(matches(got, want, t));
    ++checked;
  }
  EXPECT_EQ(checked, 40);
}

TEST(Refcases, MatmulAndLinear) {
  RefFile f = load("matmul.safetensors", 17);
  int64_t checked = 0;
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const json m = f.meta(i);
    const std::string op = m.at("op");
    SCOPED_TRACE(label(f, i, m));
    const Tensor& x = f.field(i, "input");
    Tensor got;
    if (op == "matmul") {
      got = matmul(x, f.field(i, "other"));
    } else if (op == "linear") {  // out = input @ weight^T + bias, weight [out, in]
      got = matmul(x, f.field(i, "weight").t());
      EXPECT_EQ(m.at("bias").get<bool>(), f.has(i, "bias"));
      if (f.has(i, "bias")) got = got + f.field(i, "bias");
    } else {
      ADD_FAILURE() << "no dispatch for op " << op;
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
    const std::string op = m.at("op");
    SCOPED_TRACE(label(f, i, m));
    if (op == "cross_entropy" || op == "nll_loss") {  // losses: not in core's ops yet
      ++skipped;
      continue;
    }
    const Tensor& x = f.field(i, "input");
    const int64_t dim = m.at("dim").get<int64_t>();
    Tensor got;
    if (op == "softmax") got = softmax(x, dim);
    else if (op == "log_softmax") got = log_softmax(x, dim);
    else {
      ADD_FAILURE() << "no dispatch for op " << op;
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
    SCOPED_TRACE(label(f, i, m) + " " + m.value("note", ""));
    if (m.at("op") != "conv2d") {
      ADD_FAILURE() << "no dispatch for op " << m.at("op");
      continue;
    }
    ASSERT_EQ(m.value("padding_mode", "zeros"), "zeros");
    EXPECT_EQ(m.at("bias").get<bool>(), f.has(i, "bias"));
    Tensor bias = f.has(i, "bias") ? f.field(i, "bias") : Tensor();
    Tensor got = conv2d(f.field(i, "input"), f.field(i, "weight"), bias, pair_of(m.at("stride")),
                        pair_of(m.at("padding")), pair_of(m.at("dilation")), m.at("groups").get<int64_t>());
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
    const std::string op = m.at("op");
    SCOPED_TRACE(label(f, i, m) + " " + m.value("note", ""));
    Pool2dOptions o;
    o.kernel_size = pair_of(m.at("kernel_size"));
    if (m.contains("stride") && !m.at("stride").is_null()) o.stride = pair_of(m.at("stride"));
    o.padding = pair_of(m.at("padding"));
    o.ceil_mode = m.at("ceil_mode").get<bool>();
    const Tensor& x = f.field(i, "input");
    const Tensor& want = f.field(i, "out");
    if (op == "max_pool2d") {
      o.dilation = pair_of(m.at("dilation"));
      auto [got, indices] = max_pool2d_with_indices(x, o);
      EXPECT_TRUE(matches(got, want, tol_for(m)));
      EXPECT_TRUE(same_indices(indices, f.field(i, "indices")));
      EXPECT_TRUE(matches(max_pool2d(x, o), want, tol_for(m)));
    } else if (op == "avg_pool2d") {
      o.count_include_pad = m.at("count_include_pad").get<bool>();
      const json& d = m.at("divisor_override");
      o.divisor_override = d.is_null() ? 0 : d.get<int64_t>();
      EXPECT_TRUE(matches(avg_pool2d(x, o), want, tol_for(m)));
    } else {
      ADD_FAILURE() << "no dispatch for op " << op;
      continue;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 13);
}

}  // namespace
}  // namespace ember::test
