#include "optim/checkpoint.h"

#include <charconv>
#include <cmath>

#include "base/error.h"
#include "core/half.h"
#include "core/safetensors.h"

namespace ember::optim {
namespace {

constexpr const char* kFormat = "ember-checkpoint-1";

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
  NamedTensors all;
  for (auto& [n, t] : model.state_dict()) all.emplace_back("model." + n, t);
  if (optimizer)
    for (auto& [n, t] : optimizer->state_dict()) all.emplace_back("optimizer." + n, t);
  std::map<std::string, std::string> meta = metadata;
  meta["format"] = kFormat;
  save_safetensors(path, all, meta);
}

std::map<std::string, std::string> load_checkpoint(const std::string& path, nn::Module& model, Optimizer* optimizer) {
  SafetensorsFile f = load_safetensors(path);
  auto it = f.metadata.find("format");
  EMBER_CHECK(it != f.metadata.end() && it->second == kFormat, "load_checkpoint: '", path,
              "' is not an ember checkpoint (metadata format is '", it == f.metadata.end() ? "" : it->second, "')");
  NamedTensors model_state, optim_state;
  for (auto& [n, t] : f.tensors) {
    const int64_t bad = first_non_finite(t);  // the tensors of a loaded file: contiguous, on the CPU
    if (bad >= 0) {
      const Tensor flat = t.reshape({-1});
      EMBER_FAIL("load_checkpoint: '", path, "': tensor '", n, "' holds ", flat.select(0, bad).item<double>(),
                 " at element ", bad, " of ", t.numel(),
                 ": refusing to resume from a non-finite value (the run that saved it had diverged, or the file "
                 "was altered and its checksums with it)");
    }
    if (n.rfind("model.", 0) == 0)
      model_state.emplace_back(n.substr(6), t);
    else if (n.rfind("optimizer.", 0) == 0)
      optim_state.emplace_back(n.substr(10), t);
    else
      EMBER_FAIL("load_checkpoint: '", path, "' has an unexpected key '", n, "'");
  }
  // The optimizer's loader checks before it changes anything; if the model then refuses
  // its state, the optimizer's previous state is put back.
  NamedTensors previous;
  if (optimizer) {
    EMBER_CHECK(!optim_state.empty(), "load_checkpoint: '", path, "' holds no optimizer state");
    previous = optimizer->state_dict();
    optimizer->load_state_dict(optim_state);
  }
  try {
    model.load_state_dict(model_state);
  } catch (const Error& e) {
    if (optimizer) optimizer->load_state_dict(previous);
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
