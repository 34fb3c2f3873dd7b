// Training checkpoints (optim/checkpoint.h). Note [Tied tensors in checkpoints]: a model's
// state_dict names a tied or shared tensor under each of its names, as PyTorch's does
// (word_language_model's encoder.weight and decoder.weight; Sequential({l, l})'s 0.* and
// 1.*). The file holds its data once, under the first name, and metadata "tied" maps each
// other name to that one (a JSON object); loading gives every name its tensor again, so
// load_state_dict sees PyTorch's full key set, and a tied model stays tied (its names
// share one tensor, which is written once per name with the same values).
#include "optim/checkpoint.h"

#include <charconv>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "base/error.h"
#include "core/half.h"
#include "core/safetensors.h"
#include "core/storage.h"

namespace ember::optim {
namespace {

constexpr const char* kFormat = "ember-checkpoint-1";
constexpr const char* kTied = "tied";

template <class T>
bool finite_value(const T& v) {
  return std::isfinite(static_cast<double>(v));
}

// The index of the first NaN or infinity in a CPU tensor, or -1 (integer tensors: -1).
template <class T>
int64_t first_non_finite_of(const Tensor& t) {
  const T* p = static_cast<const T*>(t.data_ptr());
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!finite_value(p[i])) return i;
  return -1;
}

int64_t first_non_finite(const Tensor& t) {
  switch (t.dtype()) {
    case kFloat64: return first_non_finite_of<double>(t);
    case kFloat32: return first_non_finite_of<float>(t);
    case kFloat16: return first_non_finite_of<Half>(t);
    case kBFloat16: return first_non_finite_of<BFloat16>(t);
    default: return -1;
  }
}

}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model, const Optimizer* optimizer,
                     const std::map<std::string, std::string>& metadata) {
  save_checkpoint(path, model, optimizer, nullptr, metadata);
}

void save_checkpoint(const std::string& path, const nn::Module& model, const Optimizer* optimizer,
                     const Scheduler* scheduler, const std::map<std::string, std::string>& metadata) {
  for (const char* reserved : {"format", kTied})
    EMBER_CHECK(!metadata.count(reserved), "save_checkpoint: the metadata key '", reserved,
                "' is ember's own; choose another name");
  NamedTensors all;
  nlohmann::json tied = nlohmann::json::object();
  // The same memory seen again: same storage, offset, shape, strides and dtype.
  std::map<std::tuple<const Storage*, int64_t, Shape, Shape, DType>, std::string> first_name;
  for (auto& [n, t] : model.state_dict()) {
    const auto [it, fresh] = first_name.emplace(std::tuple{t.impl().storage.get(), t.offset(), t.shape(), t.strides(),
                                                           t.dtype()}, n);
    if (fresh)
      all.emplace_back("model." + n, t);
    else
      tied[n] = it->second;
  }
  if (optimizer)
    for (auto& [n, t] : optimizer->state_dict()) all.emplace_back("optimizer." + n, t);
  if (scheduler)
    for (auto& [n, t] : scheduler->state_dict()) all.emplace_back("scheduler." + n, t);
  std::map<std::string, std::string> meta = metadata;
  meta["format"] = kFormat;
  if (!tied.empty()) meta[kTied] = tied.dump();
  save_safetensors(path, all, meta);
}

std::map<std::string, std::string> load_checkpoint(const std::string& path, nn::Module& model, Optimizer* optimizer,
                                                   Scheduler* scheduler) {
  SafetensorsFile f = load_safetensors(path);
  auto it = f.metadata.find("format");
  EMBER_CHECK(it != f.metadata.end() && it->second == kFormat, "load_checkpoint: '", path,
              "' is not an ember checkpoint (metadata format is '", it == f.metadata.end() ? "" : it->second, "')");
  NamedTensors model_state, optim_state, sched_state;
  std::map<std::string, Tensor> by_name;
  for (auto& [n, t] : f.tensors) {
    const int64_t bad = first_non_finite(t);  // the tensors of a loaded file: contiguous, on the CPU
    if (bad >= 0) {
      const Tensor flat = t.reshape({-1});
      EMBER_FAIL("load_checkpoint: '", path, "': tensor '", n, "' holds ", flat.select(0, bad).item<double>(),
                 " at element ", bad, " of ", t.numel(),
                 ": refusing to resume from a non-finite value (the run that saved it had diverged, or the file "
                 "was altered and its checksums with it)");
    }
    if (n.rfind("model.", 0) == 0) {
      model_state.emplace_back(n.substr(6), t);
      by_name.emplace(n.substr(6), t);
    } else if (n.rfind("optimizer.", 0) == 0) {
      optim_state.emplace_back(n.substr(10), t);
    } else if (n.rfind("scheduler.", 0) == 0) {
      sched_state.emplace_back(n.substr(10), t);
    } else {
      EMBER_FAIL("load_checkpoint: '", path, "' has an unexpected key '", n, "'");
    }
  }
  if (auto tied = f.metadata.find(kTied); tied != f.metadata.end()) {
    const nlohmann::json j = nlohmann::json::parse(tied->second, nullptr, /*allow_exceptions=*/false);
    EMBER_CHECK(j.is_object(), "load_checkpoint: '", path, "' has malformed '", kTied, "' metadata");
    for (const auto& [alias, target] : j.items()) {
      EMBER_CHECK(target.is_string(), "load_checkpoint: '", path, "' has malformed '", kTied, "' metadata");
      auto t = by_name.find(target.get<std::string>());
      EMBER_CHECK(t != by_name.end(), "load_checkpoint: '", path, "' ties '", alias, "' to '",
                  target.get<std::string>(), "', which it does not hold");
      model_state.emplace_back(alias, t->second);
    }
  }
  // The optimizer's and the scheduler's loaders check before they change anything; if a
  // later one refuses its state, the earlier ones' previous states are put back.
  EMBER_CHECK(!optimizer || !optim_state.empty(), "load_checkpoint: '", path, "' holds no optimizer state");
  EMBER_CHECK(!scheduler || !sched_state.empty(), "load_checkpoint: '", path, "' holds no scheduler state");
  NamedTensors previous_optim, previous_sched;
  if (optimizer) {
    previous_optim = optimizer->state_dict();
    optimizer->load_state_dict(optim_state);
  }
  try {
    if (scheduler) {
      previous_sched = scheduler->state_dict();
      scheduler->load_state_dict(sched_state);
    }
    try {
      model.load_state_dict(model_state);
    } catch (const Error&) {
      if (scheduler) scheduler->load_state_dict(previous_sched);
      throw;
    }
  } catch (const Error& e) {
    if (optimizer) optimizer->load_state_dict(previous_optim);
    EMBER_FAIL("load_checkpoint: '", path, "': ", e.what());
  }
  return f.metadata;
}

int64_t checkpoint_int(const std::map<std::string, std::string>& metadata, const std::string& key,
                       const std::string& path, int64_t lo, int64_t hi) {
  const auto it = metadata.find(key);
  EMBER_CHECK(it != metadata.end(), "checkpoint '", path, "' has no '", key, "' in its metadata");
  const std::string& text = it->second;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  EMBER_CHECK(ec != std::errc::invalid_argument && end == text.data() + text.size() && !text.empty(),
              "checkpoint '", path, "': its '", key, "' is '", text, "', not a whole number");
  EMBER_CHECK(ec == std::errc() && v >= lo && v <= hi, "checkpoint '", path, "': its '", key, "' is ", text,
              ", outside ", lo, " to ", hi);
  return v;
}

}  // namespace ember::optim
