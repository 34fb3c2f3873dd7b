// ember-run: starts one process per device of a data-parallel job, as torchrun does.
//
//   ember-run --nproc-per-node N [--nnodes M --node-rank R --master-addr A --master-port P]
//             [--max-restarts K] PROGRAM ARGS...
//
// --master-addr is required on every node but node 0, whose ranks reach rank 0's store on
// 127.0.0.1. Two jobs on one port share the default run id (ember-<port>); the second is
// refused (Note [One job per store prefix] in comm/rendezvous.cpp).
//
// Each process gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, EMBER_RUN_ID, EMBER_RESTART_COUNT, EMBER_MAX_RESTARTS (comm/rendezvous.h
// reads them; the examples resume from their checkpoint after a restart) and
// EMBER_JOB_SECRET, which every connection to rank 0's store proves: on one node a fresh
// random one per job and restart unless the user gives EMBER_JOB_SECRET or
// EMBER_JOB_SECRET_FILE; on several nodes the user's, else Slurm's or OpenMPI's job ids
// (Note [The launcher's secret] in comm/launch.cpp); and,
// unless set, EMBER_NUM_THREADS = cores / N so the processes do not fight over the CPU.
// Every output line is prefixed with its rank ("[rank 1] ..."; --no-prefix leaves it
// out). SIGINT and SIGTERM are forwarded. When one process fails (a non-zero exit or a
// signal), the others are stopped (SIGTERM, then SIGKILL after 5 s) and ember-run says
// which rank failed and how; it then restarts the whole group, up to --max-restarts
// times, and otherwise exits with status 1. Each rank runs in its own process group, so
// what it started is stopped with it; ranks die with ember-run (PR_SET_PDEATHSIG).
//
// Starting, watching and stopping the ranks is comm/launch.h's, shared with
// comm::spawn; this file reads the flags, execs the program in each rank and restarts
// the group.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/program.h"
#include "comm/launch.h"
#include "core/device.h"
#include "core/runtime.h"

namespace {

struct Options {
  std::string nproc = "1";
  int nnodes = 1, node_rank = 0, master_port = 29500, max_restarts = 0;
  std::string master_addr = "127.0.0.1", run_id;
  bool no_prefix = false;
  std::vector<std::string> command;
};

// Flag ranges (--help shows them).
constexpr int kMaxProcsPerNode = 1024, kMaxNodes = 65536, kMaxRestarts = 1000;

// Ranks x threads beyond this machine's cores wait for each other (4 ranks x 2 threads on
// 2 cores made each epoch 3-4x longer): said once, before the ranks start. The threads
// per rank are EMBER_NUM_THREADS, else what ember-run gives each (cores / ranks, at least 1).
void warn_if_oversubscribed(int nproc) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int threads = std::max(1, cores / nproc);
  if (const char* env = std::getenv("EMBER_NUM_THREADS")) threads = std::max(1, std::atoi(env));
  if (static_cast<long long>(nproc) * threads <= cores) return;
  std::fprintf(stderr,
               "ember-run: warning: %d ranks x %d threads = %lld threads on %d cores: they will wait for each other "
               "(fewer ranks, or EMBER_NUM_THREADS=%d)\n",
               nproc, threads, static_cast<long long>(nproc) * threads, cores, std::max(1, cores / nproc));
}

// Runs in each rank's process (after the fork, so argv is built before it): becomes the program.
int exec_program(const std::vector<char*>& argv) {
  ::execvp(argv[0], argv.data());
  std::fprintf(stderr, "ember-run: cannot run '%s': %s\n", argv[0], std::strerror(errno));
  return 127;
}

}  // namespace

int run(int argc, char** argv) {
  Options o;
  CLI::App app{"ember-run: start one process per device of a data-parallel job (torchrun's conventions)"};
  app.failure_message(ember::cli_failure_message);
  app.add_option("--nproc-per-node", o.nproc,
                 "processes on this node: 1 to " + std::to_string(kMaxProcsPerNode) + ", or 'gpu' (one per visible GPU)")
      ->type_name("INT in [1, " + std::to_string(kMaxProcsPerNode) + "]")
      ->capture_default_str();
  app.add_option("--nnodes", o.nnodes, "nodes in the job")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxNodes).description(""))
      ->type_name("INT in [1, " + std::to_string(kMaxNodes) + "]");
  app.add_option("--node-rank", o.node_rank, "this node's index, 0 to nnodes-1")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxNodes - 1).description(""))
      ->type_name("INT in [0, " + std::to_string(kMaxNodes - 1) + "]");
  CLI::Option* master_addr =
      app.add_option("--master-addr", o.master_addr,
                     "address of node 0, where rank 0 serves the store (needed on the other nodes of a job; "
                     "node 0's own ranks reach it on 127.0.0.1)")
          ->capture_default_str();
  app.add_option("--master-port", o.master_port, "port of rank 0's store")
      ->capture_default_str()
      ->check(CLI::Range(1, 65535).description(""))
      ->type_name("INT in [1, 65535]");
  app.add_option("--max-restarts", o.max_restarts, "restart the whole group this many times after a failure")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxRestarts).description(""))
      ->type_name("INT in [0, " + std::to_string(kMaxRestarts) + "]");
  app.add_option("--run-id", o.run_id,
                 "job id that prefixes the store's keys (default: ember-<port>; a second job on the same port is "
                 "refused, not mixed in)");
  app.add_flag("--no-prefix", o.no_prefix, "do not prefix output lines with the rank");
  app.prefix_command();  // everything from PROGRAM on belongs to it
  app.footer("PROGRAM ARGS...: the program each rank runs, and its arguments");
  try {
    app.parse(argc, argv);
    o.command = app.remaining();
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (o.command.empty()) {
    std::fprintf(stderr, "ember-run: no program to run (ember-run --nproc-per-node N PROGRAM ARGS...)\n");
    return 2;
  }
  if (o.command[0].rfind('-', 0) == 0) {  // a mistyped flag, not a program to start N times
    std::fprintf(stderr, "ember-run: unknown flag '%s' (ember-run's flags come before PROGRAM; --help lists them)\n",
                 o.command[0].c_str());
    return 2;
  }
  int nproc = 0;
  if (o.nproc == "gpu") {  // one per GPU this process sees (CUDA_VISIBLE_DEVICES applies); rank r takes cuda:r
    nproc = ember::cuda_device_count();
    if (nproc == 0) {
      std::fprintf(stderr, "ember-run: --nproc-per-node gpu: %s; give a number\n",
                   ember::cuda_backend_built() ? "no CUDA device is visible" : "this build has no CUDA backend");
      return 2;
    }
  } else {
    try {
      size_t used = 0;
      nproc = std::stoi(o.nproc, &used);
      if (used != o.nproc.size()) nproc = 0;
    } catch (const std::exception&) {
    }
  }
  if (nproc < 1 || nproc > kMaxProcsPerNode) {
    std::fprintf(stderr, "ember-run: --nproc-per-node must be a number from 1 to %d, or 'gpu', got '%s'\n",
                 kMaxProcsPerNode, o.nproc.c_str());
    return 2;
  }
  warn_if_oversubscribed(nproc);
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    std::fprintf(stderr, "ember-run: --node-rank %d is outside [0, %d) (--nnodes %d)\n", o.node_rank, o.nnodes,
                 o.nnodes);
    return 2;
  }
  // Node 0 holds rank 0, whose store listens on every interface when the job spans nodes:
  // its own ranks reach it on 127.0.0.1. Another node's ranks would look for it on their own machine and wait there
  // until the timeout.
  if (o.node_rank > 0 && master_addr->count() == 0) {
    std::fprintf(stderr,
                 "ember-run: --node-rank %d of --nnodes %d needs --master-addr, the address of node 0 (where rank 0 "
                 "serves the store); 127.0.0.1 would be this machine\n",
                 o.node_rank, o.nnodes);
    return 2;
  }
  ::signal(SIGPIPE, SIG_IGN);

  ember::comm::LaunchOptions lo;
  lo.nnodes = o.nnodes;
  lo.node_rank = o.node_rank;
  lo.master_addr = o.master_addr;
  lo.master_port = o.master_port;
  lo.run_id = o.run_id;  // empty: "ember-<port>"
  lo.max_restarts = o.max_restarts;
  lo.prefix_output = !o.no_prefix;
  lo.name = "ember-run";
  std::vector<char*> program;  // PROGRAM ARGS... for execvp
  for (auto& a : o.command) program.push_back(a.data());
  program.push_back(nullptr);
  for (int restart = 0;; ++restart) {
    lo.restart = restart;
    ember::comm::LaunchResult result;
    try {
      result = ember::comm::launch_workers(nproc, lo, [&](int) { return exec_program(program); });
    } catch (const ember::Error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
    if (result.ok()) return 0;
    if (result.interrupted || restart >= o.max_restarts) {
      std::fprintf(stderr, "ember-run: the job failed: %s%s\n", result.failure.c_str(),
                   o.max_restarts > 0 ? (" (after " + std::to_string(restart) + " restart(s))").c_str() : "");
      return 1;
    }
    std::fprintf(stderr, "ember-run: restarting the group (%d of %d)\n", restart + 1, o.max_restarts);
  }
}

int main(int argc, char** argv) {
  return ember::run_program("ember-run", [&] { return run(argc, argv); });
}
