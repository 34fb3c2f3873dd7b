// --resume in a job its launcher restarts after a failure (ember-run --max-restarts K,
// torchrun --max-restarts K): one fixed command line starts the run and, after a crash,
// resumes it from its last checkpoint.
//
// Note [Resuming after a restart]. The launcher restarts every rank with the same command
// line, as torchrun does, so the program must take its own last checkpoint then, and
// start from the beginning when there is none yet. `--resume FILE`:
//   - FILE exists: training resumes from it (on a first start too: an earlier job's).
//   - FILE is missing: an error, so that a mistyped name never trains from scratch
//     unnoticed; except when both hold: the launcher may restart the job
//     (EMBER_MAX_RESTARTS > 0 from ember-run, TORCHELASTIC_MAX_RESTARTS > 0 from
//     torchrun), and --save names the same file. FILE is then this job's own checkpoint,
//     not written yet (a first start, or a restart after a failure in the first epoch),
//     and training starts from the beginning; rank 0 says which.
// Checkpoints are written atomically (core/atomic_file.h): a crash while saving leaves the
// previous one, so what the job saved survives, and the only file it overwrites is --save's.
// Every process reads FILE; processes that see it and processes that do not would train
// different epochs, so a disagreement (several nodes without a shared folder) is an error.
#pragma once

#include <string>

#include "comm/process_group.h"
#include "comm/rendezvous.h"

namespace ember::examples {

// Whether to load the checkpoint `resume` (--resume; empty: none): true when it exists,
// false when it is missing and Note [Resuming after a restart] lets training start from
// the beginning; otherwise an ember::Error. A collective when `pg` is given.
bool resume_checkpoint_exists(const std::string& resume, const std::string& save, const comm::LaunchInfo& launch,
                              comm::ProcessGroup* pg);

// A test hook (tests/examples/test_distributed.cpp): with EMBER_TEST_CRASH_AFTER_CHECKPOINT=R
// set, rank R is killed (SIGKILL, as a crash would end it) on the first start, once the
// checkpoint just saved is on disk. Call it on every rank after each save.
void crash_after_checkpoint_for_tests(const comm::LaunchInfo& launch, comm::ProcessGroup* pg);

}  // namespace ember::examples
