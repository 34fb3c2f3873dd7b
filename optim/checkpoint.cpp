#include "optim/checkpoint.h"

#include "base/error.h"
#include "core/safetensors.h"

namespace ember::optim {
namespace {
constexpr const char* kFormat = "ember-checkpoint-1";
}

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

}  // namespace ember::optim
