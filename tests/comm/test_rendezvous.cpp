// Rendezvous from the environment: each launcher's variables, the defaults, the errors
// that name a missing or contradictory variable, and collectives across real processes
// meeting through rank 0's TcpStore.
#include <gtest/gtest.h>

#include <map>

#include "base/error.h"
#include "comm/rendezvous.h"
#include "core/ops.h"
#include "tests/comm/process_util.h"

namespace ember::comm {
namespace {

LaunchInfo from(const std::map<std::string, std::string>& vars) {
  return launch_info_from_env([&](const std::string& n) -> std::optional<std::string> {
    auto it = vars.find(n);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    from(vars);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Rendezvous, NothingSetIsOneProcess) {
  LaunchInfo i = from({});
  EXPECT_EQ(i.rank, 0);
  EXPECT_EQ(i.world_size, 1);
  EXPECT_EQ(i.launcher, "none");
  EXPECT_EQ(i.master_port, 29500);
}

TEST(Rendezvous, Torchrun) {
  LaunchInfo i = from({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                       {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "1234"}, {"TORCHELASTIC_RESTART_COUNT", "2"},
                       {"EMBER_RUN_ID", "job42"}});
  EXPECT_EQ(i.launcher, "torchrun");
  EXPECT_EQ(i.rank, 3);
  EXPECT_EQ(i.world_size, 4);
  EXPECT_EQ(i.local_rank, 1);
  EXPECT_EQ(i.local_world_size, 2);
  EXPECT_EQ(i.master_addr, "node7");
  EXPECT_EQ(i.master_port, 1234);
  EXPECT_EQ(i.restart, 2);
  EXPECT_EQ(i.job_id, "job42");
  // One node: MASTER_ADDR may be left out.
  EXPECT_EQ(from({{"RANK", "1"}, {"WORLD_SIZE", "2"}}).master_addr, "127.0.0.1");
}

TEST(Rendezvous, Slurm) {
  LaunchInfo i = from({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                       {"SLURM_TASKS_PER_NODE", "4(x2)"}, {"SLURM_JOB_NODELIST", "gpu[03-04,9],cpu1"},
                       {"SLURM_JOB_ID", "777"}});
  EXPECT_EQ(i.launcher, "slurm");
  EXPECT_EQ(i.rank, 5);
  EXPECT_EQ(i.world_size, 8);
  EXPECT_EQ(i.local_rank, 1);
  EXPECT_EQ(i.local_world_size, 4);
  EXPECT_EQ(i.master_addr, "gpu03");
  EXPECT_EQ(i.job_id, "777");
  EXPECT_EQ(first_slurm_host("login1,gpu[1-2]"), "login1");
  EXPECT_EQ(first_slurm_host("a-b[7,9]"), "a-b7");
}

TEST(Rendezvous, OpenMpi) {
  LaunchInfo i = from({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
                       // mpirun inside a Slurm allocation: OpenMPI's variables win.
                       {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  EXPECT_EQ(i.launcher, "openmpi");
  EXPECT_EQ(i.rank, 2);
  EXPECT_EQ(i.world_size, 3);
  EXPECT_EQ(i.local_rank, 2);
}

TEST(Rendezvous, ErrorsNameTheVariable) {
  EXPECT_NE(error_of({{"RANK", "0"}}).find("RANK is set but WORLD_SIZE is not"), std::string::npos);
  EXPECT_NE(error_of({{"WORLD_SIZE", "2"}}).find("WORLD_SIZE is set but RANK is not"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "two"}, {"WORLD_SIZE", "2"}}).find("RANK='two' is not an integer"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("RANK=2 must be below WORLD_SIZE=2"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "1"}})
                .find("LOCAL_RANK=1 must be below LOCAL_WORLD_SIZE=1"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}}).find("MASTER_ADDR is not set"),
            std::string::npos);
  EXPECT_NE(error_of({{"MASTER_PORT", "99999"}}).find("MASTER_PORT=99999"), std::string::npos);
  EXPECT_NE(error_of({{"SLURM_PROCID", "0"}}).find("SLURM_PROCID is set but SLURM_NTASKS is not"),
            std::string::npos);
}

// Worker: one rank of a real multi-process job (started by the test below).
TEST(RendezvousProcesses, Worker) {
  if (!testing::is_worker()) GTEST_SKIP() << "runs as a child of RendezvousProcesses.ThreeRanks";
  auto pg = init_process_group_from_env();
  Tensor t = full({1000}, pg->rank() + 1.0, kFloat64);
  pg->all_reduce(t)->wait();
  ASSERT_EQ(t.to_vector<double>()[999], 6.0);
  pg->barrier()->wait();
}

TEST(RendezvousProcesses, ThreeRanksOverTcpStore) {
  const int port = free_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < 3; ++r)
    pids.push_back(testing::spawn_self("RendezvousProcesses.Worker",
                                       {"RANK=" + std::to_string(r), "WORLD_SIZE=3", "MASTER_ADDR=127.0.0.1",
                                        "MASTER_PORT=" + std::to_string(port), "EMBER_COMM_TIMEOUT_S=20"}));
  EXPECT_EQ(testing::wait_all(pids), (std::vector<int>{0, 0, 0}));
}

// The same worker, three ranks started by ember-run (its variables, its rank 0 serving
// the TcpStore on the port it is given).
TEST(RendezvousProcesses, ThreeRanksUnderEmberRun) {
  const testing::CommandResult run = testing::run_command(
      testing::ember_run_self(EMBER_RUN_BIN, 3, "RendezvousProcesses.Worker", "EMBER_COMM_TIMEOUT_S=20"));
  EXPECT_TRUE(run.exited_zero()) << run.output;
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(run.output.find("[rank " + std::to_string(r) + "] [       OK ]"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace ember::comm
