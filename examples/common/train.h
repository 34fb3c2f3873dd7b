// The training driver shared by the Fashion-MNIST examples: the epoch loop with a progress
// bar, evaluation, checkpoints with --save / --resume, and the final --json line. The
// command-line flags every example takes are flags.h's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "comm/rendezvous.h"
#include "ember.h"
#include "examples/common/flags.h"

namespace ember::examples {

// Makes stdout line-buffered, into a pipe (ember-run's) too: a rank stopped because another
// failed has then written every line it printed. Call it first in main, before any output.
void line_buffered_stdout();

// The device --device names for this process (with several processes each takes
// cuda:LOCAL_RANK); auto without a CUDA device is the CPU, which rank 0 says on stdout. An
// ember::Error when a CUDA device is named that this build or machine lacks.
Device training_device(const TrainConfig& config, const comm::LaunchInfo& launch, bool distributed);

// Trains the model `make_model` builds (on the default device, which it may set) and
// prints one summary line per epoch; returns the process exit code. Errors are printed
// on one line ("PROGRAM: error: ...", base/program.h; an out-of-memory report follows its
// first line with its figures) and give exit code 1. The flags are checked (Note [Flag
// ranges]) before anything is loaded, and so are --save, --resume, --memory-snapshot,
// --max-memory and --device; a loss that becomes NaN or infinite stops training with an
// error, before the epoch's checkpoint is written. With --estimate-memory it builds the
// model on the meta device, prints the estimate (optim/memory_estimate.h) and returns,
// before any allocation.
int train_main(const std::string& model_name, const TrainConfig& config,
               const std::function<std::shared_ptr<nn::Module>()>& make_model);

// After training under the op profiler (config.profiling()): stops it; the lead process
// prints --profile's table (shares of `train_seconds`) and writes --profile-trace's file.
void finish_profile(const TrainConfig& config, bool lead, double train_seconds);

}  // namespace ember::examples
