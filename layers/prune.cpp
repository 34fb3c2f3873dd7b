// Magnitude pruning (layers/prune.h). Ranks are computed on the host, once: a model's
// Linear weights are a few million numbers at most, and an exact count needs a sort.
#include "layers/prune.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_set>

#include "base/error.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "layers/layers.h"

namespace ember::nn {
namespace {

// Every Linear weight under `m`, with its dotted name; a module or weight met twice (held
// twice, tied) once, as named_parameters() lists it.
void collect_linear(Module& m, std::vector<std::pair<std::string, Tensor>>& out) {
  std::unordered_set<const TensorImpl*> seen;
  for (const auto& [name, mod] : m.named_modules())
    if (auto* l = dynamic_cast<Linear*>(mod.get()); l && seen.insert(l->weight.impl_ptr().get()).second)
      out.emplace_back(name.empty() ? "weight" : name + ".weight", l->weight);
}

// keep[i] = 0 for the `drop` entries of smallest |v| (earlier first on ties), else 1.
void drop_smallest(const std::vector<double>& v, int64_t drop, std::vector<float>& keep) {
  std::vector<int64_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return std::abs(v[a]) < std::abs(v[b]); });
  keep.assign(v.size(), 1.0f);
  for (int64_t i = 0; i < drop; ++i) keep[order[i]] = 0.0f;
}

// In each group of 4 along the last dim, the 2 of smallest |v| go (the earlier on ties).
std::vector<float> two_of_four_mask(const std::vector<double>& v) {
  std::vector<float> keep(v.size(), 1.0f);
  for (size_t g = 0; g < v.size(); g += 4) {
    int idx[4] = {0, 1, 2, 3};
    std::stable_sort(idx, idx + 4, [&](int a, int b) { return std::abs(v[g + a]) < std::abs(v[g + b]); });
    keep[g + idx[0]] = keep[g + idx[1]] = 0.0f;
  }
  return keep;
}

Tensor mask_like(const std::vector<float>& keep, const Tensor& w) {
  Tensor host = empty(w.shape(), {kFloat32, Device::cpu()});
  std::copy(keep.begin(), keep.end(), host.data<float>());
  return host.to(w.dtype()).to(w.device());
}

}  // namespace

Pruning::Pruning(Module& model, const PruneOptions& o) {
  EMBER_CHECK(o.sparsity >= 0 && o.sparsity <= 1, "prune: sparsity must lie in [0, 1], got ", o.sparsity);
  std::vector<std::pair<std::string, Tensor>> chosen;
  collect_linear(model, chosen);
  EMBER_CHECK(!chosen.empty(), "prune: the model has no Linear layer to prune");
  std::vector<std::vector<double>> values;
  for (const auto& [name, w] : chosen) values.push_back(w.detach().to_vector<double>());

  std::vector<std::vector<float>> keep(chosen.size());
  if (o.two_of_four) {
    EMBER_CHECK(o.sparsity == 0.5, "prune: the 2:4 pattern prunes exactly half the weights, not ", o.sparsity);
    for (size_t i = 0; i < chosen.size(); ++i) {
      const Tensor& w = chosen[i].second;
      EMBER_CHECK(w.size(-1) % 4 == 0, "prune: 2:4 needs in_features divisible by 4, but ", chosen[i].first, " is ",
                  shape_str(w.shape()));
      keep[i] = two_of_four_mask(values[i]);
    }
  } else if (o.global) {
    std::vector<double> all;
    for (const auto& v : values) all.insert(all.end(), v.begin(), v.end());
    std::vector<float> all_keep;
    drop_smallest(all, std::llround(o.sparsity * static_cast<double>(all.size())), all_keep);
    size_t at = 0;
    for (size_t i = 0; i < chosen.size(); ++i) {
      keep[i].assign(all_keep.begin() + at, all_keep.begin() + at + values[i].size());
      at += values[i].size();
    }
  } else {
    for (size_t i = 0; i < chosen.size(); ++i)
      drop_smallest(values[i], std::llround(o.sparsity * static_cast<double>(values[i].size())), keep[i]);
  }

  for (size_t i = 0; i < chosen.size(); ++i) {
    const Tensor w = chosen[i].second;
    const Tensor mask = mask_like(keep[i], w);
    masks_.emplace_back(chosen[i].first, mask);
    weights_.push_back(w);
    // Note [Keeping pruned weights at zero]: the gradient half.
    w.register_post_accumulate_grad_hook([mask](const Tensor& leaf) {
      const Tensor g = leaf.grad();
      if (!g.defined()) return;
      NoGradGuard no_grad;
      g.copy_(mul(g, mask.to(g.device()).to(g.dtype())));
    });
  }
  apply();
}

void Pruning::apply() const {
  NoGradGuard no_grad;
  for (size_t i = 0; i < weights_.size(); ++i) {
    const Tensor& w = weights_[i];
    w.copy_(mul(w, masks_[i].second.to(w.device()).to(w.dtype())));
  }
}

double Pruning::sparsity() const {
  double pruned = 0, all = 0;
  for (const auto& [name, m] : masks_) {
    all += static_cast<double>(m.numel());
    pruned += static_cast<double>(m.numel()) - sum(m.to(kFloat64)).item<double>();
  }
  return all > 0 ? pruned / all : 0.0;
}

}  // namespace ember::nn
