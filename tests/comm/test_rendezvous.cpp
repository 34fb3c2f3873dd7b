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
  EXPECT_EQ(i.max_restarts, 0);
}

TEST(Rendezvous, Torchrun) {
  LaunchInfo i = from({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                       {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "1234"}, {"TORCHELASTIC_RESTART_COUNT", "2"},
                       {"TORCHELASTIC_MAX_RESTARTS", "3"}, {"EMBER_RUN_ID", "job42"},
                       {"EMBER_JOB_SECRET", "a-secret-of-20-chars"}});
  EXPECT_EQ(i.launcher, "torchrun");
  EXPECT_EQ(i.rank, 3);
  EXPECT_EQ(i.world_size, 4);
  EXPECT_EQ(i.local_rank, 1);
  EXPECT_EQ(i.local_world_size, 2);
  EXPECT_EQ(i.master_addr, "node7");
  EXPECT_EQ(i.master_port, 1234);
  EXPECT_EQ(i.restart, 2);
  EXPECT_EQ(i.max_restarts, 3);
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
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"}})
                .find("MASTER_ADDR is not set"),
            std::string::npos);
  EXPECT_NE(error_of({{"MASTER_PORT", "99999"}}).find("MASTER_PORT=99999"), std::string::npos);
  EXPECT_NE(error_of({{"SLURM_PROCID", "0"}}).find("SLURM_PROCID is set but SLURM_NTASKS is not"),
            std::string::npos);
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Note [Local rank and size]: taken from the global rank and size only where the job is
// known to be on one node; on several, that default would be wrong, and is an error.
TEST(Rendezvous, LocalRankAndSizeDefaultOnlyOnOneNode) {
  for (const auto& addr : std::map<std::string, std::string>{{}, {"MASTER_ADDR", "127.0.0.1"}}) {
    std::map<std::string, std::string> vars = {{"RANK", "3"}, {"WORLD_SIZE", "4"}};
    vars.insert(addr);
    const LaunchInfo i = from(vars);
    EXPECT_EQ(i.local_rank, 3);
    EXPECT_EQ(i.local_world_size, 4);
  }
  EXPECT_EQ(from({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "node7"}}).local_rank,
            3);
  // Several nodes need a secret for the store (Slurm's job id gives one below).
  std::string e = error_of({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "node7"}});
  EXPECT_TRUE(has(e, "LOCAL_WORLD_SIZE is not set and the 4 ranks may span several nodes")) << e;
  EXPECT_TRUE(has(e, "MASTER_ADDR=node7")) << e;
  e = error_of({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "node7"}});
  EXPECT_TRUE(has(e, "LOCAL_RANK is not set, and LOCAL_WORLD_SIZE=2 of WORLD_SIZE=4")) << e;
  e = error_of({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}});
  EXPECT_TRUE(has(e, "LOCAL_RANK=1 differs from RANK=3")) << e;

  // Slurm: a node's count from SLURM_TASKS_PER_NODE, by SLURM_NODEID where nodes differ.
  std::map<std::string, std::string> slurm = {{"SLURM_PROCID", "2"},       {"SLURM_NTASKS", "3"},
                                              {"SLURM_LOCALID", "0"},      {"SLURM_TASKS_PER_NODE", "2,1"},
                                              {"SLURM_JOB_NODELIST", "a[1-2]"}, {"SLURM_JOB_ID", "9"}};
  e = error_of(slurm);
  EXPECT_TRUE(has(e, "SLURM_NODEID")) << e;
  slurm["SLURM_NODEID"] = "1";
  EXPECT_EQ(from(slurm).local_world_size, 1);
  slurm["SLURM_TASKS_PER_NODE"] = "1(x2),1";
  slurm["SLURM_NODEID"] = "2";
  EXPECT_EQ(from(slurm).local_world_size, 1);
  slurm.erase("SLURM_TASKS_PER_NODE");
  e = error_of(slurm);
  EXPECT_TRUE(has(e, "SLURM_TASKS_PER_NODE is not set")) << e;
  slurm["SLURM_NNODES"] = "1";  // one node: the local size is the job's, and the local rank the rank
  e = error_of(slurm);
  EXPECT_TRUE(has(e, "SLURM_LOCALID=0 differs from SLURM_PROCID=2")) << e;
  slurm["SLURM_LOCALID"] = "2";
  EXPECT_EQ(from(slurm).local_world_size, 3);
}

// Note [Two launchers' variables]: the inner launcher's win, as in PyTorch; RANK and
// WORLD_SIZE no launcher set must agree with a launcher's.
TEST(Rendezvous, TwoLaunchersVariables) {
  // torchrun (or ember-run) in an srun step of one task per node: its own ranks.
  const std::map<std::string, std::string> outer = {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"},
                                                    {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}};
  for (const char* restart : {"TORCHELASTIC_RESTART_COUNT", "EMBER_RESTART_COUNT"}) {
    auto vars = outer;
    vars.insert({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
                 {"MASTER_ADDR", "node0"}, {restart, "0"}, {"SLURM_JOB_ID", "9"}, {"SLURM_STEP_ID", "0"}});
    const LaunchInfo i = from(vars);
    EXPECT_EQ(i.launcher, "torchrun");
    EXPECT_EQ(i.rank, 5);
    EXPECT_EQ(i.world_size, 8);
  }
  // Set by hand and agreeing (RANK=$SLURM_PROCID ...): fine.
  EXPECT_EQ(from({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}}).rank, 1);
  // Left over in the shell of an mpirun job: every process would be rank 0 of 1.
  std::string e = error_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"OMPI_COMM_WORLD_RANK", "1"},
                            {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_TRUE(has(e, "RANK=0 and WORLD_SIZE=1 contradict OMPI_COMM_WORLD_RANK=1 and OMPI_COMM_WORLD_SIZE=2")) << e;
  e = error_of({{"RANK", "1"}, {"WORLD_SIZE", "3"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}});
  EXPECT_TRUE(has(e, "contradict SLURM_PROCID=1 and SLURM_NTASKS=2")) << e;
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

// Started by hand, as a user would without a launcher: the same EMBER_JOB_SECRET in each.
TEST(RendezvousProcesses, ThreeRanksOverTcpStore) {
  const int port = free_port();
  const std::string secret = random_secret();
  std::vector<pid_t> pids;
  for (int r = 0; r < 3; ++r)
    pids.push_back(testing::spawn_self("RendezvousProcesses.Worker",
                                       {"RANK=" + std::to_string(r), "WORLD_SIZE=3", "MASTER_ADDR=127.0.0.1",
                                        "MASTER_PORT=" + std::to_string(port), "EMBER_COMM_TIMEOUT_S=20",
                                        "EMBER_JOB_SECRET=" + secret}));
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
