#include "examples/common/memory_advice.h"

#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>

#include "memory/oom.h"
#include "optim/memory_estimate.h"

namespace ember::examples {
namespace {

Shape with_batch(int64_t batch, const Shape& sample) {
  Shape s{batch};
  s.insert(s.end(), sample.begin(), sample.end());
  return s;
}

// The model as make_model builds it, on the meta device (shapes, no data).
std::shared_ptr<nn::Module> meta_model(const ModelFactory& make_model) {
  const Device saved = default_device();
  set_default_device(Device::meta());
  std::shared_ptr<nn::Module> model;
  try {
    model = make_model();
  } catch (...) {
    set_default_device(saved);
    throw;
  }
  set_default_device(saved);
  return model;
}

optim::MemoryEstimateOptions estimate_options(const TrainConfig& c, Device device, int world,
                                              const SampleInput& sample) {
  return {.target = device,
          .autocast = c.precision == "bf16" ? std::optional(kBFloat16) : std::nullopt,
          .checkpoint = c.checkpoint && !sample.tokens,
          .optimizer = c.optimizer,
          // ZeRO: each rank's share of the state (and at stage 2, the gradients)
          .optimizer_state_shards = c.zero > 0 ? world : 1,
          .gradient_shards = c.zero == 2 ? world : 1,
          .token_inputs = sample.tokens};
}

}  // namespace

void print_memory_estimate(const TrainConfig& c, Device device, int64_t batch, int world,
                           const ModelFactory& make_model, const SampleInput& sample) {
  const std::shared_ptr<nn::Module> model = meta_model(make_model);
  const optim::MemoryEstimateOptions options = estimate_options(c, device, world, sample);
  const Shape input = with_batch(batch, sample.shape);
  const optim::MemoryEstimate est = optim::memory_estimate(*model, input, options);
  const std::size_t capacity =
      c.device_memory.empty() ? device_allocator(device).memory_limit() : parse_memory_size(c.device_memory, device);
  const int64_t fits = optim::max_batch_that_fits(*model, input, capacity, options);
  std::printf("%s", est.str().c_str());
  std::printf("largest batch that fits in %s: %lld\n", memory::format_bytes(capacity).c_str(),
              static_cast<long long>(fits));
  if (c.json) {
    nlohmann::json j = nlohmann::json::parse(est.json());
    j["max_batch_that_fits"] = fits;
    j["capacity_bytes"] = capacity;
    j["precision"] = c.precision;
    j["checkpoint"] = c.checkpoint;
    std::printf("%s\n", j.dump().c_str());
  }
}

optim::MemoryEstimate estimate_step(const TrainConfig& c, Device device, int world, const ModelFactory& make_model,
                                    const SampleInput& sample, int64_t batch) {
  const std::shared_ptr<nn::Module> model = meta_model(make_model);
  return optim::memory_estimate(*model, with_batch(batch, sample.shape), estimate_options(c, device, world, sample));
}

memory::AdviceTerms advice_terms(const TrainConfig& c, Device device, int world, std::size_t held,
                                 const std::string& cap_origin, const ModelFactory& make_model,
                                 const SampleInput& sample) {
  memory::AdviceTerms t;
  t.raise_cap = "--max-memory";
  t.micro_batches = c.auto_microbatch ? "" : "--auto-microbatch";
  t.checkpointing = c.checkpoint ? "" : "--checkpoint";
  t.lower_precision = c.precision == "bf16" ? "" : "--precision bf16";
  t.batch_size = "--batch-size";
  t.estimate = "--estimate-memory";
  t.cap_origin = cap_origin;
  // One estimate per cap: --auto-microbatch meets several OOMs under one cap.
  struct Memo {
    std::mutex mu;
    std::map<std::size_t, int64_t> fits;
  };
  auto memo = std::make_shared<Memo>();
  t.largest_batch = [c, device, world, held, make_model, sample, memo](std::size_t cap) -> int64_t {
    std::lock_guard lock(memo->mu);
    if (const auto it = memo->fits.find(cap); it != memo->fits.end()) return it->second;
    const std::shared_ptr<nn::Module> model = meta_model(make_model);
    const optim::MemoryEstimateOptions options = estimate_options(c, device, world, sample);
    const Shape one = with_batch(1, sample.shape);
    // The step's room: what the cap leaves beyond what training started with, plus the
    // parameters (held then, and counted by the estimate). The free pieces of the segments
    // held then are left out: a step may not be able to use them (another pool), and a
    // batch named here must not run out again.
    const auto params = static_cast<std::size_t>(optim::memory_estimate(*model, one, options).parameters);
    const std::size_t capacity = (cap > held ? cap - held : 0) + params;
    const int64_t per_rank = optim::max_batch_that_fits(*model, one, capacity, options);
    return memo->fits[cap] = per_rank * world;  // --batch-size is the global batch
  };
  return t;
}

}  // namespace ember::examples
