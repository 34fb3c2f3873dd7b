// comm::spawn: forked ranks that join through init_process_group_from_env and all-reduce;
// their output prefixed with the rank; a rank that fails (non-zero exit, a signal, an
// exception) makes spawn throw an Error naming it and how it ended, quickly, with the
// other ranks and what they started stopped.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

#include "base/error.h"
#include "comm/launch.h"
#include "comm/rendezvous.h"
#include "core/ops.h"

namespace ember::comm {
namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// How many processes run exactly `command` (pgrep -fx).
int count_processes(const std::string& command) {
  FILE* p = ::popen(("pgrep -fx '" + command + "' | wc -l").c_str(), "r");
  int n = -1;
  if (std::fscanf(p, "%d", &n) != 1) n = -1;
  ::pclose(p);
  return n;
}

class Spawn : public ::testing::TestWithParam<int> {};

TEST_P(Spawn, RanksAllReduceThroughTheEnvironment) {
  const int n = GetParam();
  ::testing::internal::CaptureStdout();
  spawn(n, [n](int local_rank) {
    ::setenv("EMBER_COMM_TIMEOUT_S", "30", 1);  // a broken rendezvous fails the test, not hangs it
    auto pg = init_process_group_from_env();
    EMBER_CHECK(pg->rank() == local_rank && pg->size() == n, "rank ", pg->rank(), " of ", pg->size());
    Tensor t = full({3}, pg->rank() + 1.0);
    pg->all_reduce(t)->wait();
    std::printf("sum %g\nport %s\n", t.to_vector<double>()[0], std::getenv("MASTER_PORT"));
  });
  const std::string out = ::testing::internal::GetCapturedStdout();
  for (int r = 0; r < n; ++r)
    EXPECT_TRUE(has(out, "[rank " + std::to_string(r) + "] sum " + std::to_string(n * (n + 1) / 2) + "\n")) << out;
  EXPECT_TRUE(has(out, "[rank 0] port ")) << "MASTER_PORT is chosen when not set: " << out;
}

INSTANTIATE_TEST_SUITE_P(WorldSize, Spawn, ::testing::Values(2, 3));

// Runs spawn(3, fn) where rank `bad` does `fail` and the others start a child and sleep;
// returns spawn's error, having checked that it came quickly and left no process behind.
std::string failing_spawn(int bad, const std::function<void()>& fail) {
  const auto t0 = std::chrono::steady_clock::now();
  // A command line no other test (or process of another test) runs: sleep 62.<our pid>.
  const std::string sleep = "sleep 62." + std::to_string(::getpid());
  std::string message;
  try {
    spawn(3, [&](int local_rank) {
      if (local_rank == bad) {
        ::usleep(100000);  // after the others have started their sleep
        fail();
      }
      std::system(sleep.c_str());
    });
    ADD_FAILURE() << "spawn returned";
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4)) << "the other ranks were not stopped";
  EXPECT_EQ(count_processes(sleep), 0) << "processes left behind";
  return message;
}

TEST(SpawnFailure, ANonZeroExitIsNamed) {
  const std::string e = failing_spawn(1, [] { std::_Exit(3); });
  EXPECT_TRUE(has(e, "spawn: rank 1 (local rank 1, pid ")) << e;
  EXPECT_TRUE(has(e, "exited with status 3")) << e;
}

TEST(SpawnFailure, ASignalIsNamed) {
  const std::string e = failing_spawn(2, [] { ::raise(SIGKILL); });
  EXPECT_TRUE(has(e, "rank 2 (local rank 2, pid ")) << e;
  EXPECT_TRUE(has(e, "was killed by signal 9")) << e;
}

TEST(SpawnFailure, AnExceptionIsPrintedWithItsRank) {
  ::testing::internal::CaptureStderr();
  const std::string e = failing_spawn(0, [] { throw Error("the data is missing"); });
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(has(e, "rank 0 (local rank 0, pid ")) << e;
  EXPECT_TRUE(has(e, "exited with status 1")) << e;
  EXPECT_TRUE(has(err, "[rank 0] comm::spawn: local rank 0 failed: the data is missing\n")) << err;
}

TEST(SpawnFailure, BadArgumentsAreErrors) {
  EXPECT_THROW(spawn(0, [](int) {}), Error);
  LaunchOptions o;
  o.nnodes = 2;
  o.node_rank = 2;
  EXPECT_THROW(spawn(1, [](int) {}, o), Error);
}

}  // namespace
}  // namespace ember::comm
