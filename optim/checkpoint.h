// Training checkpoints: a model's state_dict and an optimizer's in one safetensors file
// (keys "model.<name>" and "optimizer.<key>"), with string metadata such as the epoch.
// Written atomically; loading validates everything before it changes anything.
#pragma once

#include <map>
#include <string>

#include "layers/module.h"
#include "optim/optimizer.h"

namespace ember::optim {

void save_checkpoint(const std::string& path, const nn::Module& model, const Optimizer* optimizer,
                     const std::map<std::string, std::string>& metadata = {});

// Restores the model (and the optimizer when given) and returns the file's metadata. A
// truncated, corrupted or mismatched file raises ember::Error and leaves both untouched.
std::map<std::string, std::string> load_checkpoint(const std::string& path, nn::Module& model, Optimizer* optimizer);

}  // namespace ember::optim
