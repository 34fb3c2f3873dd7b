// Collectives across real processes: ember-run starts 1-4 ranks of this binary, which
// meet through rank 0's TcpStore (init_process_group_from_env; one rank alone needs no
// store server, comm/rendezvous.h) and run the checks of tests/comm/collective_checks.h on
// CPU tensors (Gloo): every collective, reduce op and dtype at 0, 1 and 1023 elements,
// then 16 Mi float32 elements. A rank that finds a mismatch fails, and ember-run with it.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "comm/rendezvous.h"
#include "tests/comm/collective_checks.h"
#include "tests/comm/process_util.h"

namespace ember::comm {
namespace {

// One rank (started by the test below); says how many collectives it checked.
TEST(CollectiveProcesses, Worker) {
  if (!testing::is_worker()) GTEST_SKIP() << "runs as a rank of CollectiveProcesses.UnderEmberRun";
  auto pg = init_process_group_from_env();
  testing::CheckReport report;
  testing::check_every_collective(*pg, Device::cpu(), {0, 1, 1023}, report);
  testing::check_large(*pg, Device::cpu(), report);
  std::printf("checked %lld collectives\n", static_cast<long long>(report.collectives()));
  report.raise_if_any(*pg);
}

class CollectiveProcesses : public ::testing::TestWithParam<int> {};

// Every rank must pass, and all must have checked the same (non-zero) count.
TEST_P(CollectiveProcesses, UnderEmberRun) {
  const int n = GetParam();
  const testing::CommandResult run = testing::run_command(
      testing::ember_run_self(EMBER_RUN_BIN, n, "CollectiveProcesses.Worker", "EMBER_COMM_TIMEOUT_S=30"));
  EXPECT_TRUE(run.exited_zero()) << run.output;
  const std::string line = "] checked ";
  const size_t at = run.output.find(line);
  ASSERT_NE(at, std::string::npos) << run.output;
  const std::string count = run.output.substr(at + line.size(), run.output.find('\n', at) - at - line.size());
  EXPECT_NE(count, "0 collectives");
  for (int r = 0; r < n; ++r) {
    const std::string rank = "[rank " + std::to_string(r) + "] ";
    EXPECT_NE(run.output.find(rank + "checked " + count + "\n"), std::string::npos) << run.output;
    EXPECT_NE(run.output.find(rank + "[       OK ] CollectiveProcesses.Worker"), std::string::npos) << run.output;
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSize, CollectiveProcesses, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "_ranks"; });

}  // namespace
}  // namespace ember::comm
