// Shared by the PyTorch reference-case tests (test_refcases.cpp checks forward values,
// test_refcase_grads.cpp the gradients): loading a file, the README's tolerances, the
// comparisons, and one forward dispatch per file family, so both tests run each case
// through the same ember calls.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ember.h"
#include "reference.h"

#ifndef EMBER_REFCASES_DIR  // the build defines it; this fallback suits a run from the source root
#define EMBER_REFCASES_DIR "tests/refcases"
#endif

namespace ember::test::refcase {

using nlohmann::json;
using Pair = std::pair<int64_t, int64_t>;

struct RefFile {
  std::string name;
  SafetensorsFile st;
  int64_t num_cases = 0;

  json meta(int64_t i) const { return json::parse(st.metadata.at("case" + std::to_string(i))); }
  // On the device the tests run on (EMBER_TEST_DEVICE), where the ops under test run.
  Tensor field(int64_t i, const std::string& f) const { return st.at("case" + std::to_string(i) + "." + f).to(default_device()); }
  bool has(int64_t i, const std::string& f) const { return st.contains("case" + std::to_string(i) + "." + f); }
};

inline RefFile load(const std::string& name, int64_t expected_cases) {
  RefFile r;
  r.name = name;
  r.st = load_safetensors(std::string(EMBER_REFCASES_DIR) + "/" + name);
  r.num_cases = std::stoll(r.st.metadata.at("num_cases"));
  EXPECT_EQ(r.num_cases, expected_cases) << name << ": the file changed; update the expected counts";
  return r;
}

// F64: atol 1e-10, rtol 1e-8. F32: PyTorch's result is within D of the float64 result
// on the same inputs (D = the case's f32_vs_f64_max_abs_diff, measured when the case was
// made); ember, computing the same op from the same float32 inputs, must be as accurate
// to within 8 roundings of the output (8u|y|, u = 2^-24), whatever its summation order.
// By the triangle inequality the two may differ by 2D + 8u|y|. Cases without D keep
// atol and rtol 1e-4.
struct Tol {
  double rtol, atol;
};
inline Tol tol_for(const json& m) {
  if (m.at("dtype") == "F64") return {1e-8, 1e-10};
  if (m.contains("f32_vs_f64_max_abs_diff")) return {8 * 0x1p-24, 2 * m.at("f32_vs_f64_max_abs_diff").get<double>()};
  return {1e-4, 1e-4};
}

// Compares one output with the reference tensor, dtype included.
inline ::testing::AssertionResult matches(const Tensor& got, const Tensor& want, Tol t) {
  if (got.defined() && got.dtype() != want.dtype()) {
    return ::testing::AssertionFailure() << "dtype " << dtype_name(got.dtype()) << ", want " << dtype_name(want.dtype());
  }
  return all_close(got, want, t.rtol, t.atol);
}
inline ::testing::AssertionResult same_indices(const Tensor& got, const Tensor& want) {
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

inline std::string label(const RefFile& f, int64_t i, const json& m) {
  return f.name + " case" + std::to_string(i) + " (" + m.at("op").get<std::string>() + ", " +
         m.at("dtype").get<std::string>() + ")" + (m.contains("note") ? " " + m.value("note", "") : "");
}
inline std::vector<int64_t> dims_of(const json& m) {  // null: all dims
  return m.at("dim").is_null() ? std::vector<int64_t>{} : m.at("dim").get<std::vector<int64_t>>();
}
inline Pair pair_of(const json& v) {
  std::vector<int64_t> p = v.get<std::vector<int64_t>>();
  return {p.at(0), p.at(1)};
}

// A case's operands by field name: the file's own tensors, or leaves made from them.
struct Operands {
  Tensor input, other, weight, bias;
};
inline const char* const kOperandNames[] = {"input", "other", "weight", "bias"};
inline Tensor& operand(Operands& o, const std::string& name) {
  return name == "input" ? o.input : name == "other" ? o.other : name == "weight" ? o.weight : o.bias;
}
inline Operands operands_of(const RefFile& f, int64_t i) {
  Operands o;
  for (const char* n : kOperandNames)
    if (f.has(i, n)) operand(o, n) = f.field(i, n);
  return o;
}

// ----- forward dispatch: an undefined result means "no dispatch for this op" -----

// elementwise.safetensors. For max over one dim, *indices receives the indices.
inline Tensor elementwise_forward(const json& m, const Operands& a, Tensor* indices = nullptr) {
  const std::string op = m.at("op");
  const Tensor& x = a.input;
  if (op == "add") return add(x, a.other);
  if (op == "sub") return sub(x, a.other);
  if (op == "mul") return mul(x, a.other);
  if (op == "div") return div(x, a.other);
  if (op == "exp") return exp(x);
  if (op == "log") return log(x);
  if (op == "tanh") return tanh(x);
  if (op == "sigmoid") return sigmoid(x);
  if (op == "relu") return relu(x);
  if (op == "gelu") return gelu(x, m.at("approximate") == "tanh");
  if (op == "sum") return sum(x, dims_of(m), m.at("keepdim").get<bool>());
  if (op == "mean") return mean(x, dims_of(m), m.at("keepdim").get<bool>());
  if (op == "var") return var(x, dims_of(m), m.at("correction").get<int64_t>(), m.at("keepdim").get<bool>());
  if (op == "max" && m.at("dim").is_null()) return max(x);
  if (op == "max") {
    std::vector<int64_t> dims = dims_of(m);
    EXPECT_EQ(dims.size(), 1u);
    if (dims.size() != 1) return {};
    auto [v, idx] = max(x, dims[0], m.at("keepdim").get<bool>());
    if (indices) *indices = idx;
    return v;
  }
  return {};
}

// matmul.safetensors: torch.matmul, and linear (out = input @ weight^T + bias, weight [out, in]).
inline Tensor matmul_forward(const json& m, const Operands& a) {
  const std::string op = m.at("op");
  if (op == "matmul") return matmul(a.input, a.other);
  if (op == "linear") {
    Tensor out = matmul(a.input, a.weight.t());
    return a.bias.defined() ? out + a.bias : out;
  }
  return {};
}

// softmax_loss.safetensors, softmax and log_softmax cases (is_loss tells the others apart).
inline bool is_loss(const json& m) { return m.at("op") == "cross_entropy" || m.at("op") == "nll_loss"; }
inline Tensor softmax_forward(const json& m, const Operands& a) {
  const std::string op = m.at("op");
  const int64_t dim = m.at("dim").get<int64_t>();
  if (op == "softmax") return softmax(a.input, dim);
  if (op == "log_softmax") return log_softmax(a.input, dim);
  return {};
}

// conv2d.safetensors.
inline Tensor conv2d_forward(const json& m, const Operands& a) {
  if (m.at("op") != "conv2d") return {};
  return conv2d(a.input, a.weight, a.bias, pair_of(m.at("stride")), pair_of(m.at("padding")),
                pair_of(m.at("dilation")), m.at("groups").get<int64_t>());
}

// pool2d.safetensors. For max_pool2d, *indices receives the indices.
inline Pool2dOptions pool_options(const json& m) {
  Pool2dOptions o;
  o.kernel_size = pair_of(m.at("kernel_size"));
  if (m.contains("stride") && !m.at("stride").is_null()) o.stride = pair_of(m.at("stride"));
  o.padding = pair_of(m.at("padding"));
  o.ceil_mode = m.at("ceil_mode").get<bool>();
  if (m.at("op") == "max_pool2d") o.dilation = pair_of(m.at("dilation"));
  if (m.at("op") == "avg_pool2d") {
    o.count_include_pad = m.at("count_include_pad").get<bool>();
    const json& d = m.at("divisor_override");
    o.divisor_override = d.is_null() ? 0 : d.get<int64_t>();
  }
  return o;
}
inline Tensor pool2d_forward(const json& m, const Operands& a, Tensor* indices = nullptr) {
  const std::string op = m.at("op");
  if (op == "max_pool2d") {
    auto [out, idx] = max_pool2d_with_indices(a.input, pool_options(m));
    if (indices) *indices = idx;
    return out;
  }
  if (op == "avg_pool2d") return avg_pool2d(a.input, pool_options(m));
  return {};
}

// Backpropagates sum(out * the case's grad_out) and compares the gradient of each input
// the case's metadata lists under "grads" with the file's grad.<name>; returns how many.
inline int64_t expect_listed_grads(const RefFile& f, int64_t i, const json& m, const Tensor& out,
                                   std::map<std::string, Tensor>& in, Tol tol) {
  mul(out, f.field(i, "grad_out")).sum().backward();
  int64_t checked = 0;
  for (const auto& g : m.at("grads")) {
    const std::string name = g.get<std::string>();
    SCOPED_TRACE("grad." + name);
    EXPECT_TRUE(matches(in[name].grad(), f.field(i, "grad." + name), tol));
    ++checked;
  }
  return checked;
}

}  // namespace ember::test::refcase
