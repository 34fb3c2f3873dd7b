// Text generation with and without the KV cache (sample.h).
#include "examples/gpt/sample.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "core/autograd.h"

namespace ember::examples::gpt {
namespace {

// A token drawn from the logits [V] (float64 on the host, in nanoGPT's order of steps).
int64_t draw(std::vector<double> logits, const SampleOptions& o, Generator& gen) {
  const auto V = static_cast<int64_t>(logits.size());
  for (double& l : logits) l /= o.temperature;
  if (o.top_k > 0 && o.top_k < V) {
    std::vector<double> sorted = logits;
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<>());
    const double kth = sorted[static_cast<size_t>(o.top_k - 1)];
    for (double& l : logits)
      if (l < kth) l = -std::numeric_limits<double>::infinity();
  }
  const double top = *std::max_element(logits.begin(), logits.end());
  double total = 0;
  for (double& l : logits) total += (l = std::exp(l - top));
  const double u = rand({1}, {kFloat64, Device::cpu()}, &gen).item<double>() * total;
  double acc = 0;
  for (int64_t i = 0; i < V; ++i) {
    acc += logits[static_cast<size_t>(i)];
    if (u < acc) return i;
  }
  // u rounded up to the total: the last token with any weight.
  for (int64_t i = V - 1; i > 0; --i)
    if (logits[static_cast<size_t>(i)] > 0) return i;
  return 0;
}

// The logits [V] of the last position of `out` [1, t, V].
std::vector<double> last_logits(const Tensor& out) {
  return out.select(1, out.size(1) - 1).reshape({-1}).to(Device::cpu(), kFloat64).to_vector<double>();
}

Tensor ids_tensor(std::vector<int64_t>::const_iterator begin, std::vector<int64_t>::const_iterator end, Device device) {
  Tensor t = empty({1, static_cast<int64_t>(end - begin)}, {kInt64, Device::cpu()});
  std::copy(begin, end, static_cast<int64_t*>(t.data_ptr()));
  return t.to(device);
}

}  // namespace

std::vector<int64_t> generate(GPT& model, const std::vector<int64_t>& prompt, const SampleOptions& o, Generator& gen) {
  EMBER_CHECK(!prompt.empty(), "gpt: the prompt must hold at least one character");
  EMBER_CHECK(o.temperature > 0, "gpt: the temperature must be positive, got ", o.temperature);
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const Device device = model.wte->weight.device();
  const int64_t block = model.config().block_size;
  std::vector<int64_t> ids = prompt;
  KVCache cache;
  for (int64_t n = 0; n < o.tokens; ++n) {
    const auto len = static_cast<int64_t>(ids.size());
    Tensor logits;
    if (!o.kv_cache) {
      logits = model(ids_tensor(ids.end() - std::min(len, block), ids.end(), device));
    } else if (cache.length == 0 || cache.length >= block) {
      // The prompt; or, once the context is past the block, the window slid and every
      // position changed: the window runs again as a new prompt.
      cache = {};
      logits = model.forward_cached(ids_tensor(ids.end() - std::min(len, block), ids.end(), device), cache);
    } else {
      logits = model.forward_cached(ids_tensor(ids.end() - 1, ids.end(), device), cache);
    }
    ids.push_back(draw(last_logits(logits), o, gen));
  }
  model.train(was_training);
  return ids;
}

}  // namespace ember::examples::gpt
