// Starting the processes of a data-parallel job on this node: the one way ember does it,
// used by the ember-run launcher (tools/ember_run) and by comm::spawn.
//
// launch_workers forks one process per local rank. Each gets the environment
// comm/rendezvous.h reads (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
// MASTER_ADDR, MASTER_PORT, EMBER_RUN_ID, EMBER_RESTART_COUNT, EMBER_MAX_RESTARTS,
// EMBER_JOB_SECRET (Note [The launcher's secret] in comm/launch.cpp: on one node a fresh
// random secret for each call, unless the user gives one) and, unless set,
// EMBER_NUM_THREADS = cores / ranks so the processes do not fight over the CPU), runs in its own process group (stopping a rank stops what it started) and dies
// with its parent (PR_SET_PDEATHSIG). Every output line is prefixed with its rank
// ("[rank 1] ...").
// Fail-fast: when one rank fails (a non-zero exit or a signal) the others are stopped
// (SIGTERM, then SIGKILL after `stop_grace`) and the result says which rank failed and
// how. SIGINT and SIGTERM sent to the launching process are passed on to every rank.
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace ember::comm {

struct LaunchOptions {
  int nnodes = 1;
  int node_rank = 0;          // this node's index: its ranks are node_rank * nproc + local rank
  std::string master_addr{};  // empty: MASTER_ADDR from the environment, else 127.0.0.1
  int master_port = 0;        // 0: MASTER_PORT from the environment, else a free port
  std::string run_id{};       // EMBER_RUN_ID; empty: "ember-<port>" (one job per port: comm/rendezvous.cpp)
  int restart = 0;            // EMBER_RESTART_COUNT
  int max_restarts = 0;       // EMBER_MAX_RESTARTS: how often the launcher may restart the group
  bool prefix_output = true;  // "[rank R] " before each line
  bool forward_signals = true;  // SIGINT / SIGTERM handlers while the workers run (then restored)
  std::chrono::milliseconds stop_grace{5000};  // SIGTERM to SIGKILL when stopping the others
  std::string name = "ember";  // begins the launcher's own messages ("ember-run: ...")
};

// How a group of workers ended. failure is empty when every rank exited 0; otherwise
// e.g. "rank 1 (local rank 1, pid 2345) exited with status 3" or "... was killed by
// signal 9 (Killed)" (ranks found failed at once: each, joined by "; "), or
// "interrupted by signal 2 (Interrupt)".
struct LaunchResult {
  std::string failure;
  int failed_rank = -1;      // the lowest rank that failed; -1: none, or interrupted
  bool interrupted = false;  // SIGINT / SIGTERM reached the launcher (no restart then)
  bool ok() const { return failure.empty(); }
};

// What a worker runs in the forked child once its environment and output are in place;
// its return value is the process's exit status (stdio is flushed, then _exit: the
// parent's static objects are not destroyed a second time). ember-run's execs the
// program and returns only when that fails.
using WorkerMain = std::function<int(int local_rank)>;

// Starts `nproc` workers of this node, pumps their output to this process's stdout and
// stderr, and waits for all of them (stopping the rest after the first failure).
// Throws ember::Error only when a worker cannot be started.
LaunchResult launch_workers(int nproc, const LaunchOptions& options, const WorkerMain& worker);

// Forks `nprocs` processes, as PyTorch's mp.spawn does with the fork start method: each
// runs fn(local_rank) with the environment above (so fn typically begins with
// comm::init_process_group_from_env()) and exits 0, or 1 with the exception's message
// printed when fn throws. Returns when all have exited 0; otherwise throws an
// ember::Error naming the rank that failed and how, after stopping the others.
//
// Requirement (Note [Forking with threads] in comm/launch.cpp): call spawn before this
// process starts threads of its own (a ProcessGroup, a prefetching DataLoader, or the
// CPU thread pool of the first tensor op), as the fork start method requires: a child
// has only the thread that forked, and a mutex another thread held stays locked there.
void spawn(int nprocs, const std::function<void(int local_rank)>& fn, const LaunchOptions& options = {});

// A TCP port that was free a moment ago (bind port 0 on loopback and read it back).
int free_port();

// "exited with status 3", "was killed by signal 9 (Killed)": how a wait status ended.
std::string describe_wait_status(int status);

}  // namespace ember::comm
