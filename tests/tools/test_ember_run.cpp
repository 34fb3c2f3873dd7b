// ember-run: the environment each rank gets, rank-prefixed output, fail-fast with a
// message naming the failed rank and how it ended, no process left behind, restarts.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <string>

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
      "'echo R=$RANK W=$WORLD_SIZE L=$LOCAL_RANK LW=$LOCAL_WORLD_SIZE A=$MASTER_ADDR P=$MASTER_PORT'");
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
  Result r = ember_run("--nproc-per-node 2 --max-restarts 2 sh -c '[ $EMBER_RESTART_COUNT = 1 ]'");
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

TEST(EmberRun, BadArgumentsAreClear) {
  Result r = ember_run("--nproc-per-node 0 true");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(has(r.out, "--nproc-per-node must be a positive number")) << r.out;
  r = ember_run("--nproc-per-node 1 --nnodes 2 --node-rank 2 true");
  EXPECT_TRUE(has(r.out, "--node-rank 2 is outside [0, 2)")) << r.out;
  r = ember_run("--nproc-per-node 1");
  EXPECT_TRUE(has(r.out, "no program to run")) << r.out;
  r = ember_run("--nproc-per-node 1 /no/such/program");
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r.out, "cannot run '/no/such/program'")) << r.out;
  EXPECT_TRUE(has(r.out, "exited with status 127")) << r.out;
}

}  // namespace
