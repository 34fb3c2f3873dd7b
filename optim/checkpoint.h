// Training checkpoints: a model's state_dict, an optimizer's and a learning-rate
// scheduler's in one safetensors file (keys "model.<name>", "optimizer.<key>" and
// "scheduler.<key>"), with string metadata such as the epoch.
// Written atomically, with checksums (core/safetensors.h); loading validates everything
// before it changes anything: the checksums, the keys and shapes, and that every
// floating-point value is finite (a run resumed from a NaN only trains on NaN). A tensor
// the model holds under several names (tied weights, a module held twice) is stored once
// and loaded under each name (Note [Tied tensors in checkpoints] in checkpoint.cpp).
#pragma once

#include <map>
#include <string>

#include "layers/module.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"

namespace ember::optim {

// `metadata` may not use ember's own keys "format" and "tied". The optimizer and the
// scheduler may be null.
void save_checkpoint(const std::string& path, const nn::Module& model, const Optimizer* optimizer,
                     const std::map<std::string, std::string>& metadata = {});
void save_checkpoint(const std::string& path, const nn::Module& model, const Optimizer* optimizer,
                     const Scheduler* scheduler, const std::map<std::string, std::string>& metadata);

// Restores the model (and the optimizer and the scheduler when given: the file must hold
// their states) and returns the file's metadata. A truncated, corrupted or mismatched
// file raises ember::Error and leaves all of them untouched.
std::map<std::string, std::string> load_checkpoint(const std::string& path, nn::Module& model, Optimizer* optimizer,
                                                   Scheduler* scheduler = nullptr);

// The whole number a checkpoint's metadata holds under `key`, checked: an ember::Error
// naming the file, the key and the range when it is missing, not a plain decimal number
// ("12", not "12.0", "1e3" or " 12"), or outside [lo, hi].
int64_t checkpoint_int(const std::map<std::string, std::string>& metadata, const std::string& key,
                       const std::string& path, int64_t lo, int64_t hi);

}  // namespace ember::optim
