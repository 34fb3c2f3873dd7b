// Helpers for tests that run ranks as real processes: this test binary started again
// with one test selected and RANK / WORLD_SIZE / MASTER_PORT set; the worker test skips
// itself unless EMBER_TEST_WORKER is set. A port for them: comm::free_port()
// (comm/launch.h, included here).
#pragma once

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/launch.h"

extern char** environ;

namespace ember::comm::testing {

// Starts this binary running only `test` with the extra variables; returns its pid.
inline pid_t spawn_self(const std::string& test, const std::vector<std::string>& extra_env) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  for (const auto& e : extra_env) env.push_back(e);
  env.push_back("EMBER_TEST_WORKER=1");
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe", filter = "--gtest_filter=" + test;
  char* argv[] = {exe.data(), filter.data(), nullptr};
  pid_t pid = -1;
  if (::posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, envp.data()) != 0) return -1;
  return pid;
}

// The exit status of each pid (-1: killed by a signal).
inline std::vector<int> wait_all(const std::vector<pid_t>& pids) {
  std::vector<int> codes;
  for (pid_t p : pids) {
    int status = 0;
    ::waitpid(p, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  return codes;
}

inline bool is_worker() { return std::getenv("EMBER_TEST_WORKER") != nullptr; }

struct CommandResult {
  int status = -1;  // as waitpid gives it
  std::string output;  // stdout, then stderr as it came
  bool exited_zero() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
};

// Runs a shell command to its end; its stderr goes with its stdout.
inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  r.status = ::pclose(p);
  return r;
}

// `launcher` (ember-run's path) starting `nproc` ranks of this binary, each running only
// `test` as a worker, on a free port; `env`: variables set before, "A=1 B=2".
inline std::string ember_run_self(const std::string& launcher, int nproc, const std::string& test,
                                  const std::string& env) {
  return "EMBER_TEST_WORKER=1 " + env + " " + launcher + " --nproc-per-node " + std::to_string(nproc) +
         " --master-port " + std::to_string(free_port()) + " /proc/" + std::to_string(::getpid()) +
         "/exe --gtest_filter=" + test;
}

}  // namespace ember::comm::testing
