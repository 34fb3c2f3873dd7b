// PyTorch reference cases for the layers: cross_entropy and nll_loss (softmax_loss.safetensors),
// batch_norm and layer_norm (norm.safetensors) and embedding (embedding.safetensors). Each
// case checks the forward output and every gradient the file holds at the README's
// tolerances; batch norm also checks running_*_after. The norm and embedding cases run
// a second time through the modules (BatchNorm1d/2d, LayerNorm, Embedding) loaded with
// the case's tensors via load_state_dict. Each test counts what it checked.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>

#include "tests/core/refcase_util.h"

namespace ember::test {
namespace {

using namespace refcase;  // NOLINT
namespace F = nn::functional;

Tensor fresh_leaf(const Tensor& t) {
  Tensor c = t.clone();
  c.requires_grad_();
  return c;
}

// Compares leaf.grad() with the file's grad_<name>; counts it.
void expect_grad(const RefFile& f, int64_t i, const std::string& name, const Tensor& leaf, Tol tol, int64_t& grads) {
  SCOPED_TRACE("grad_" + name);
  ASSERT_TRUE(f.has(i, "grad_" + name));
  ASSERT_TRUE(leaf.grad().defined()) << "no gradient reached " << name;
  EXPECT_TRUE(matches(leaf.grad(), f.field(i, "grad_" + name), tol));
  ++grads;
}

TEST(LossRefcases, CrossEntropyAndNll) {
  RefFile f = load("softmax_loss.safetensors", 29);
  int64_t ce = 0, nll = 0, grads = 0, smoothed = 0, weighted = 0, kdim = 0, ignoring = 0;
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const json m = f.meta(i);
    if (!is_loss(m)) continue;
    SCOPED_TRACE(label(f, i, m));
    const std::string op = m.at("op");
    ASSERT_EQ(m.at("class_dim").get<int64_t>(), 1);
    F::LossOptions o;
    o.reduction = F::parse_reduction(m.at("reduction"));
    o.ignore_index = m.at("ignore_index").get<int64_t>();
    EXPECT_EQ(m.at("class_weight").get<bool>(), f.has(i, "class_weight"));
    if (f.has(i, "class_weight")) o.weight = f.field(i, "class_weight");
    if (op == "cross_entropy") o.label_smoothing = m.at("label_smoothing").get<double>();
    const Tensor& target = f.field(i, "target");
    Tensor input = fresh_leaf(f.field(i, "input"));
    Tensor out = op == "cross_entropy" ? nn::CrossEntropyLoss(o)(input, target) : nn::NLLLoss(o)(input, target);
    const Tol tol = tol_for(m);
    EXPECT_TRUE(matches(out, f.field(i, "out"), tol));
    out.backward(f.field(i, "grad_out"));
    expect_grad(f, i, "input", input, tol, grads);
    (op == "cross_entropy" ? ce : nll)++;
    smoothed += o.label_smoothing > 0;
    weighted += o.weight.defined();
    kdim += input.dim() > 2;
    ignoring += m.contains("num_ignored");
  }
  EXPECT_EQ(ce, 13);
  EXPECT_EQ(nll, 6);
  EXPECT_EQ(grads, 19);
  EXPECT_EQ(smoothed, 5);
  EXPECT_EQ(weighted, 2);
  EXPECT_EQ(kdim, 3);
  EXPECT_EQ(ignoring, 2);
}

// The case's batch_norm / layer_norm through the functional form.
TEST(NormRefcases, Functional) {
  RefFile f = load("norm.safetensors", 13);
  int64_t bn = 0, ln = 0, grads = 0, running = 0;
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const json m = f.meta(i);
    SCOPED_TRACE(label(f, i, m));
    const std::string op = m.at("op");
    const Tol tol = tol_for(m);
    Tensor x = fresh_leaf(f.field(i, "input"));
    Tensor w = f.has(i, "weight") ? fresh_leaf(f.field(i, "weight")) : Tensor();
    Tensor b = f.has(i, "bias") ? fresh_leaf(f.field(i, "bias")) : Tensor();
    Tensor out;
    if (op == "batch_norm") {
      EXPECT_EQ(m.at("affine").get<bool>(), w.defined());
      Tensor rm = f.field(i, "running_mean").clone(), rv = f.field(i, "running_var").clone();
      const bool training = m.at("training").get<bool>();
      out = F::batch_norm(x, rm, rv, w, b, training, m.at("momentum").get<double>(), m.at("eps").get<double>());
      if (training) {
        EXPECT_TRUE(matches(rm, f.field(i, "running_mean_after"), tol)) << "running_mean";
        EXPECT_TRUE(matches(rv, f.field(i, "running_var_after"), tol)) << "running_var (unbiased update)";
        ++running;
      } else {
        EXPECT_FALSE(f.has(i, "running_mean_after"));
        EXPECT_TRUE(matches(rm, f.field(i, "running_mean"), {0, 0})) << "eval changed running_mean";
        EXPECT_TRUE(matches(rv, f.field(i, "running_var"), {0, 0})) << "eval changed running_var";
      }
      ++bn;
    } else if (op == "layer_norm") {
      EXPECT_EQ(m.at("elementwise_affine").get<bool>(), w.defined());
      out = F::layer_norm(x, m.at("normalized_shape").get<Shape>(), w, b, m.at("eps").get<double>());
      ++ln;
    } else {
      ADD_FAILURE() << "no dispatch for op " << op;
      continue;
    }
    EXPECT_TRUE(matches(out, f.field(i, "out"), tol));
    out.backward(f.field(i, "grad_out"));
    expect_grad(f, i, "input", x, tol, grads);
    if (w.defined()) expect_grad(f, i, "weight", w, tol, grads);
    if (b.defined()) expect_grad(f, i, "bias", b, tol, grads);
  }
  EXPECT_EQ(bn, 7);
  EXPECT_EQ(ln, 6);
  EXPECT_EQ(running, 5);
  EXPECT_EQ(grads, 13 + 2 * 10);  // every case has grad_input; 10 are affine
}

// The same cases through the modules, their state loaded with load_state_dict.
TEST(NormRefcases, Modules) {
  RefFile f = load("norm.safetensors", 13);
  int64_t checked = 0;
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const json m = f.meta(i);
    SCOPED_TRACE(label(f, i, m));
    const std::string op = m.at("op");
    const Tol tol = tol_for(m);
    const DType dt = f.field(i, "input").dtype();
    const bool affine = f.has(i, "weight");
    std::unique_ptr<nn::Module> mod;
    NamedTensors state;
    if (affine) state = {{"weight", f.field(i, "weight")}, {"bias", f.field(i, "bias")}};
    if (op == "batch_norm") {
      const Tensor& x = f.field(i, "input");
      const int64_t C = x.size(1);
      const double eps = m.at("eps").get<double>(), mom = m.at("momentum").get<double>();
      if (x.dim() == 4) mod = std::make_unique<nn::BatchNorm2d>(C, eps, mom, affine);
      else mod = std::make_unique<nn::BatchNorm1d>(C, eps, mom, affine);
      state.emplace_back("running_mean", f.field(i, "running_mean"));
      state.emplace_back("running_var", f.field(i, "running_var"));
      state.emplace_back("num_batches_tracked", scalar_tensor(0, kInt64));
      mod->train(m.at("training").get<bool>());
    } else {
      mod = std::make_unique<nn::LayerNorm>(m.at("normalized_shape").get<Shape>(), m.at("eps").get<double>(), affine);
    }
    mod->to(dt);
    mod->load_state_dict(state);
    Tensor x = fresh_leaf(f.field(i, "input"));
    Tensor out = (*mod)(x);
    EXPECT_TRUE(matches(out, f.field(i, "out"), tol));
    out.backward(f.field(i, "grad_out"));
    EXPECT_TRUE(matches(x.grad(), f.field(i, "grad_input"), tol)) << "grad_input";
    for (auto& [n, p] : mod->named_parameters()) {
      ASSERT_TRUE(p.grad().defined()) << n;
      EXPECT_TRUE(matches(p.grad(), f.field(i, "grad_" + n), tol)) << "grad_" << n;
    }
    if (f.has(i, "running_mean_after")) {
      NamedTensors buffers = mod->named_buffers();
      ASSERT_EQ(buffers.size(), 3u);
      EXPECT_TRUE(matches(buffers[0].second, f.field(i, "running_mean_after"), tol)) << buffers[0].first;
      EXPECT_TRUE(matches(buffers[1].second, f.field(i, "running_var_after"), tol)) << buffers[1].first;
      EXPECT_EQ(buffers[2].second.item<int64_t>(), 1) << buffers[2].first;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 13);
}

TEST(EmbeddingRefcases, FunctionalAndModule) {
  RefFile f = load("embedding.safetensors", 5);
  int64_t checked = 0, padded = 0;
  for (int64_t i = 0; i < f.num_cases; ++i) {
    const json m = f.meta(i);
    SCOPED_TRACE(label(f, i, m));
    ASSERT_EQ(m.at("op"), "embedding");
    const Tol tol = tol_for(m);
    std::optional<int64_t> pad;
    if (!m.at("padding_idx").is_null()) pad = m.at("padding_idx").get<int64_t>();
    const Tensor& idx = f.field(i, "indices");
    // Functional.
    Tensor w = fresh_leaf(f.field(i, "weight"));
    Tensor out = F::embedding(idx, w, pad);
    EXPECT_TRUE(matches(out, f.field(i, "out"), tol));
    out.backward(f.field(i, "grad_out"));
    ASSERT_TRUE(w.grad().defined());
    EXPECT_TRUE(matches(w.grad(), f.field(i, "grad_weight"), tol));
    // Module.
    nn::Embedding emb(m.at("num_embeddings").get<int64_t>(), m.at("embedding_dim").get<int64_t>(), pad);
    emb.to(f.field(i, "weight").dtype());
    emb.load_state_dict({{"weight", f.field(i, "weight")}});
    Tensor out2 = emb(idx);
    EXPECT_TRUE(matches(out2, f.field(i, "out"), tol));
    out2.backward(f.field(i, "grad_out"));
    EXPECT_TRUE(matches(emb.weight.grad(), f.field(i, "grad_weight"), tol));
    if (pad) {
      EXPECT_EQ(values(sum(abs(emb.weight.grad().select(0, *pad)))), std::vector<double>{0});
      ++padded;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 5);
  EXPECT_EQ(padded, 1);
}

}  // namespace
}  // namespace ember::test
