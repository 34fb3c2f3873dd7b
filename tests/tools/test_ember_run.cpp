// ember-run: the environment each rank gets, rank-prefixed output, fail-fast with a
// message naming the failed rank and how it ended, no process left behind, restarts,
// --master-addr on the nodes that need it, and a second job on a running job's port.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "comm/rendezvous.h"
#include "tests/comm/process_util.h"

namespace {

struct Result {
  std::string out;  // stdout and stderr
  int status;
  double seconds;
};

// env: variables for ember-run, "NAME=value ..." (empty: none).
Result ember_run(const std::string& args, const std::string& env = "") {
  const auto t0 = std::chrono::steady_clock::now();
  std::string out;
  FILE* p = ::popen(((env.empty() ? "" : "env " + env + " ") + EMBER_RUN_BIN + " " + args + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = ::pclose(p);
  return {out, WIFEXITED(st) ? WEXITSTATUS(st) : -1,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(EmberRun, SetsTheEnvironmentAndPrefixesLines) {
  Result r = ember_run(
      "--nproc-per-node 2 --nnodes 2 --node-rank 1 --master-addr 10.1.2.3 --master-port 4321 sh -c "
      "'echo R=$RANK W=$WORLD_SIZE L=$LOCAL_RANK LW=$LOCAL_WORLD_SIZE A=$MASTER_ADDR P=$MASTER_PORT'",
      "EMBER_JOB_SECRET=two-nodes-secret-0123456789");  // several nodes need one given
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "[rank 2] R=2 W=4 L=0 LW=2 A=10.1.2.3 P=4321")) << r.out;
  EXPECT_TRUE(has(r.out, "[rank 3] R=3 W=4 L=1 LW=2 A=10.1.2.3 P=4321")) << r.out;
}

TEST(EmberRun, OneRankFailingStopsTheOthersAndIsNamed) {
  // Rank 1 fails at once; rank 0 (and the sleep it started) would run for a minute (sleep 61: a name no other test uses).
  Result r = ember_run("--nproc-per-node 3 sh -c 'if [ $RANK = 1 ]; then exit 7; fi; sleep 61'");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r.out, "rank 1 (local rank 1, pid ")) << r.out;
  EXPECT_TRUE(has(r.out, "exited with status 7")) << r.out;
  EXPECT_LT(r.seconds, 10.0) << "the other ranks were not stopped";
  Result left = ember_run("--nproc-per-node 1 sh -c 'pgrep -fx \"sleep 61\" | wc -l'");
  EXPECT_TRUE(has(left.out, "[rank 0] 0")) << "processes left behind: " << left.out;
}

TEST(EmberRun, ARankKilledBySignalIsNamed) {
  Result r = ember_run("--nproc-per-node 2 sh -c 'if [ $RANK = 0 ]; then kill -9 $$; fi; sleep 60'");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r.out, "rank 0 (local rank 0")) << r.out;
  EXPECT_TRUE(has(r.out, "killed by signal 9")) << r.out;
  EXPECT_LT(r.seconds, 10.0);
}

TEST(EmberRun, RestartsTheGroup) {
  Result r =
      ember_run("--nproc-per-node 2 --max-restarts 2 sh -c '[ $EMBER_RESTART_COUNT = 1 ] && [ $EMBER_MAX_RESTARTS = 2 ]'");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "restarting the group (1 of 2)")) << r.out;
}

// --nproc-per-node gpu: one rank per visible GPU (three emulated ones here, in the
// emulated build), or an error saying why there is none.
TEST(EmberRun, OneRankPerGpu) {
  const std::string args = "--nproc-per-node gpu sh -c 'echo W=$WORLD_SIZE L=$LOCAL_RANK'";
#if EMBER_CUDA_EMULATED
  Result r = ember_run(args, "EMBER_EMU_DEVICES=3");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "[rank 2] W=3 L=2")) << r.out;
  r = ember_run(args, "EMBER_EMU_DEVICES=3 CUDA_VISIBLE_DEVICES=1");
  EXPECT_TRUE(has(r.out, "[rank 0] W=1 L=0")) << r.out;
#else
  Result r = ember_run(args);
  if (r.status == 2) EXPECT_TRUE(has(r.out, "ember-run: --nproc-per-node gpu: ")) << r.out;  // no GPU here
  else EXPECT_EQ(r.status, 0) << r.out;
#endif
}

// Node 0's ranks reach rank 0's store on 127.0.0.1; another node's cannot.
TEST(EmberRun, OtherNodesNeedTheMasterAddress) {
  Result r = ember_run("--nproc-per-node 1 --nnodes 2 --node-rank 1 true");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.out, "--node-rank 1 of --nnodes 2 needs --master-addr")) << r.out;
  r = ember_run("--nproc-per-node 1 --nnodes 2 --node-rank 0 sh -c 'echo A=$MASTER_ADDR'",
                "EMBER_JOB_SECRET=two-nodes-secret-0123456789");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "[rank 0] A=127.0.0.1")) << r.out;
}

// Waits up to `seconds` for `file` to appear; whether it did.
bool wait_for(const std::filesystem::path& file, int seconds) {
  for (int i = 0; i < seconds * 50 && !std::filesystem::exists(file); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return std::filesystem::exists(file);
}

// A rank of the jobs below: joins its group, and (rank 0) says so in EMBER_TEST_DIR; then
// stays in the job until the test writes "release" there (or a minute has passed).
TEST(EmberRunJobs, Worker) {
  if (!ember::comm::testing::is_worker()) GTEST_SKIP() << "runs as a rank of EmberRunJobs.*";
  auto pg = ember::comm::init_process_group_from_env();
  pg->barrier()->wait();
  const std::filesystem::path dir = std::getenv("EMBER_TEST_DIR");
  if (pg->rank() == 0) std::ofstream(dir / "joined") << "";
  wait_for(dir / "release", 60);
  pg->barrier()->wait();
}

// A second job given a running job's port, and so its default run id (ember-<port>),
// reaches the first job's store from another "node": with another secret its rank is
// refused by the handshake; with the same secret (Note [One job per store prefix]) by
// the rank claim. Either way at once, and the first job runs on untouched.
TEST(EmberRunJobs, ASecondJobOnTheSamePortIsRefused) {
  const auto dir = std::filesystem::temp_directory_path() / ("ember_run_jobs_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string port = std::to_string(ember::comm::free_port());
  const std::string worker = " /proc/" + std::to_string(::getpid()) + "/exe --gtest_filter=EmberRunJobs.Worker";
  const std::string env = "EMBER_TEST_WORKER=1 EMBER_TEST_DIR=" + dir.string() +
                          " EMBER_COMM_TIMEOUT_S=20 EMBER_JOB_SECRET=job-a-secret-0123456789";
  auto finish_a = [&] {  // lets job A's ranks end; true when it has
    std::ofstream(dir / "release") << "";
    return wait_for(dir / "a.rc", 30);
  };
  struct Cleanup {  // job A ends, and its folder goes, however the test does
    std::function<bool()> finish;
    std::filesystem::path dir;
    ~Cleanup() {
      finish();
      std::filesystem::remove_all(dir);
    }
  } cleanup{finish_a, dir};
  const std::string a = "env " + env + " " + EMBER_RUN_BIN + " --nproc-per-node 2 --master-port " + port + worker;
  ASSERT_EQ(std::system(("(" + a + " > " + (dir / "a.out").string() + " 2>&1; echo $? > " + (dir / "a.tmp").string() +
                         "; mv " + (dir / "a.tmp").string() + " " + (dir / "a.rc").string() + ") &")
                            .c_str()),
            0);
  ASSERT_TRUE(wait_for(dir / "joined", 30)) << "job A did not start";

  const std::string b_job =
      "--nproc-per-node 1 --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port " + port + worker;
  Result b = ember_run(b_job, env + " EMBER_JOB_SECRET=job-b-secret-0123456789");
  EXPECT_EQ(b.status, 1) << b.out;
  EXPECT_TRUE(has(b.out, "TcpStore: the store at 127.0.0.1:" + port + " refused this process")) << b.out;
  b = ember_run(b_job, env);  // job A's secret too
  EXPECT_EQ(b.status, 1) << b.out;
  EXPECT_TRUE(has(b.out, "rank 1 of job 'ember-" + port + "' (restart 0) already joined the store")) << b.out;

  ASSERT_TRUE(finish_a()) << "job A did not end";
  std::ifstream rc(dir / "a.rc"), out(dir / "a.out");
  const std::string a_out{std::istreambuf_iterator<char>(out), {}};
  int a_status = -1;
  rc >> a_status;
  EXPECT_EQ(a_status, 0) << a_out;
  for (int r = 0; r < 2; ++r)
    EXPECT_TRUE(has(a_out, "[rank " + std::to_string(r) + "] [       OK ] EmberRunJobs.Worker")) << a_out;
}

TEST(EmberRun, BadArgumentsAreClear) {
  Result r = ember_run("--nproc-per-node 0 true");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.out, "--nproc-per-node must be a number from 1 to 1024, or 'gpu', got '0'")) << r.out;
  r = ember_run("--nproc-per-node 2147483647 true");  // std::bad_alloc before
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.out, "got '2147483647'")) << r.out;
  r = ember_run("--nproc-per-node 1 --no-such-flag true");  // was started as the program, on every rank
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.out, "ember-run: unknown flag '--no-such-flag'")) << r.out;
  r = ember_run("--nproc-per-node 1 --nnodes 2 --node-rank 2 true");
  EXPECT_TRUE(has(r.out, "--node-rank 2 is outside [0, 2)")) << r.out;
  r = ember_run("--nproc-per-node 1");
  EXPECT_TRUE(has(r.out, "no program to run")) << r.out;
  r = ember_run("--nproc-per-node 1 /no/such/program");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r.out, "cannot run '/no/such/program'")) << r.out;
  EXPECT_TRUE(has(r.out, "exited with status 127")) << r.out;
}

// Ranks x threads beyond the cores wait for each other: said before the ranks start.
TEST(EmberRun, WarnsWhenRanksTimesThreadsExceedTheCores) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  Result r = ember_run("--nproc-per-node 4 true", "EMBER_NUM_THREADS=" + std::to_string(cores));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "ember-run: warning: 4 ranks x " + std::to_string(cores) + " threads = " +
                             std::to_string(4 * cores) + " threads on " + std::to_string(cores) + " cores"))
      << r.out;
  r = ember_run("--nproc-per-node 1 true");  // one rank, the cores' threads: no warning
  EXPECT_FALSE(has(r.out, "warning")) << r.out;
}

}  // namespace
