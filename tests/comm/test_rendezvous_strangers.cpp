// A job admits only its own ranks (issue 29): a stranger with the job's port and run id
// but not its secret is refused while the job completes with its own ranks; two jobs
// started at once on one port: exactly one runs, the other is refused with the advice to
// choose another port; ember-run's secret is random per job and per restart, in the
// ranks' environment and on no command line; a job on several nodes needs one given.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "comm/job_secret.h"
#include "comm/rendezvous.h"
#include "core/ops.h"
#include "tests/comm/process_util.h"

namespace ember::comm {
namespace {

using namespace testing;
namespace fs = std::filesystem;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

int count_of(const std::string& s, const std::string& part) {
  int n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Starts `command` in a shell, not waiting for it; its pid.
pid_t start_shell(const std::string& command) {
  std::string sh = "/bin/sh", flag = "-c", cmd = command;
  char* argv[] = {sh.data(), flag.data(), cmd.data(), nullptr};
  pid_t pid = -1;
  return ::posix_spawn(&pid, sh.c_str(), nullptr, nullptr, argv, environ) == 0 ? pid : -1;
}

int exit_code(pid_t pid) { return wait_all({pid})[0]; }

// No secret of the test's own environment reaches the processes it starts.
const std::string kClean = "env -u EMBER_JOB_SECRET -u EMBER_JOB_SECRET_FILE -u SLURM_JOB_ID -u SLURM_STEP_ID "
                           "-u PMIX_NAMESPACE -u OMPI_MCA_ess_base_jobid -u OMPI_MCA_orte_ess_jobid ";

std::string self() { return "/proc/" + std::to_string(::getpid()) + "/exe"; }

// Worker: one rank of a two-rank job; rank 1 first waits for the file EMBER_TEST_GO
// (when set), so that a stranger can try its slot before it arrives; at the end every
// rank waits for the file EMBER_TEST_RELEASE (when set), so that the job holds its port.
TEST(RendezvousStrangers, Worker) {
  if (!is_worker()) GTEST_SKIP() << "runs as a child of the RendezvousStrangers tests";
  const LaunchInfo info = launch_info_from_env();
  if (const char* go = std::getenv("EMBER_TEST_GO"); go && info.rank == 1)
    for (int i = 0; i < 600 && !fs::exists(go); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto pg = init_process_group(info);
  Tensor t = full({8}, pg->rank() + 1.0, kFloat64);
  pg->all_reduce(t)->wait();
  std::printf("rank %d of %d: sum %g\n", pg->rank(), pg->size(), t.to_vector<double>()[0]);
  ASSERT_EQ(t.to_vector<double>()[0], 3.0);
  if (const char* release = std::getenv("EMBER_TEST_RELEASE"))
    for (int i = 0; i < 600 && !fs::exists(release); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  pg->barrier()->wait();
}

std::string job_command(int port, const std::string& env) {
  return kClean + "EMBER_TEST_WORKER=1 EMBER_COMM_TIMEOUT_S=30 " + env + " " + EMBER_RUN_BIN +
         " --nproc-per-node 2 --master-port " + std::to_string(port) + " " + self() +
         " --gtest_filter=RendezvousStrangers.Worker";
}

// The probe: a process started as rank 1 with the job's port and run id, before
// the real rank 1 arrives. Before: it was taken in (both exited 0, world size 2).
TEST(RendezvousStrangers, StrangerIsRefusedWhileTheJobCompletes) {
  const fs::path dir = fs::temp_directory_path() / ("ember_stranger_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const int port = free_port();
  const std::string out = (dir / "job.out").string(), go = (dir / "go").string();
  const pid_t job = start_shell(job_command(port, "EMBER_TEST_GO=" + go) + " > " + out + " 2>&1");
  ASSERT_GT(job, 0);
  const std::string stranger = kClean + "EMBER_TEST_WORKER=1 RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                               std::to_string(port) + " EMBER_RUN_ID=ember-" + std::to_string(port) +
                               " EMBER_COMM_TIMEOUT_S=30 ";
  const std::string run_stranger = " " + self() + " --gtest_filter=RendezvousStrangers.Worker";
  for (const std::string& secret : {std::string(), std::string("EMBER_JOB_SECRET=a-wrong-secret-0123456789 ")}) {
    const CommandResult r = run_command(stranger + secret + run_stranger);
    EXPECT_FALSE(r.exited_zero()) << r.output;
    EXPECT_TRUE(has(r.output, "TcpStore: the store at 127.0.0.1:" + std::to_string(port) +
                                  " refused this process: it does not hold that job's secret"))
        << r.output;
  }
  std::ofstream(go) << "1";
  EXPECT_EQ(exit_code(job), 0) << read_file(out);
  const std::string text = read_file(out);
  EXPECT_EQ(count_of(text, "refused a connection from 127.0.0.1:"), 2) << text;
  EXPECT_TRUE(has(text, "[rank 0] rank 0 of 2: sum 3")) << text;
  EXPECT_TRUE(has(text, "[rank 1] rank 1 of 2: sum 3")) << text;
  fs::remove_all(dir);
}

// Before: two jobs started at the same instant on one port both failed in 2 of 5 tries.
TEST(RendezvousStrangers, TwoJobsRacingForOnePortOneRuns) {
  const fs::path dir = fs::temp_directory_path() / ("ember_race_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (int round = 0; round < 3; ++round) {
    const int port = free_port();
    const std::string a = (dir / "a.out").string(), b = (dir / "b.out").string();
    const std::string release = (dir / "release").string();
    fs::remove(release);
    // The job that gets the port holds it until the other has ended (however it ends).
    const std::string env = "EMBER_TEST_RELEASE=" + release;
    const pid_t pa = start_shell(job_command(port, env) + " > " + a + " 2>&1");
    const pid_t pb = start_shell(job_command(port, env) + " > " + b + " 2>&1");
    int status = 0;
    const pid_t first = ::waitpid(-1, &status, 0);
    ASSERT_TRUE(first == pa || first == pb);
    const int c_first = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ofstream(release) << "1";
    const int c_second = exit_code(first == pa ? pb : pa);
    const int ca = first == pa ? c_first : c_second, cb = first == pa ? c_second : c_first;
    const std::string oa = read_file(a), ob = read_file(b);
    ASSERT_EQ((ca == 0) + (cb == 0), 1) << "round " << round << "\nfirst job:\n" << oa << "\nsecond job:\n" << ob;
    const std::string& lost = ca == 0 ? ob : oa;
    EXPECT_TRUE(has(lost, "choose another MASTER_PORT / --master-port")) << lost;
    EXPECT_TRUE(has(ca == 0 ? oa : ob, "[rank 1] rank 1 of 2: sum 3")) << (ca == 0 ? oa : ob);
  }
  fs::remove_all(dir);
}

// Each rank prints both command lines `ps` would show (its own, ember-run's), then its
// secret; rank 0 then exits with EMBER_TEST_EXIT (a failed rank stops the others, which
// may not have printed yet: rank 0's lines are the ones always there).
const std::string kShowSecret =
    "sh -c 'echo \"cmdline: $(tr \"\\0\" \" \" < /proc/$$/cmdline) | $(tr \"\\0\" \" \" < /proc/$PPID/cmdline)\"; "
    "echo \"secret=$EMBER_JOB_SECRET\"; if [ $RANK = 0 ]; then exit ${EMBER_TEST_EXIT:-0}; fi'";

std::vector<std::string> secrets_in(const std::string& out, const std::string& rank = "[0-9]+") {
  std::vector<std::string> found;
  const std::regex re("\\[rank " + rank + "\\] secret=([^\\n]*)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it)
    found.push_back((*it)[1]);
  return found;
}

TEST(EmberRunSecret, RandomPerJobAndRestartAndOnNoCommandLine) {
  auto run = [](const std::string& env, const std::string& flags) {
    return run_command(kClean + env + " " + EMBER_RUN_BIN + " --nproc-per-node 2 --master-port " +
                       std::to_string(free_port()) + " " + flags + " " + kShowSecret);
  };
  const CommandResult first = run("", ""), second = run("", "");
  ASSERT_TRUE(first.exited_zero()) << first.output;
  const auto s1 = secrets_in(first.output), s2 = secrets_in(second.output);
  ASSERT_EQ(s1.size(), 2u) << first.output;
  ASSERT_EQ(s2.size(), 2u) << second.output;
  EXPECT_EQ(s1[0], s1[1]);  // the job's ranks share it
  EXPECT_EQ(s1[0].size(), 64u);
  EXPECT_NE(s1[0], s2[0]);  // another job, another secret
  EXPECT_EQ(count_of(first.output, s1[0]), 2) << first.output;  // in the "secret=" lines, on no command line

  const CommandResult restarted = run("EMBER_TEST_EXIT=1", "--max-restarts 1");
  const auto s3 = secrets_in(restarted.output, "0");
  ASSERT_EQ(s3.size(), 2u) << restarted.output;
  EXPECT_NE(s3[0], s3[1]) << restarted.output;  // one per attempt

  const CommandResult given = run("EMBER_JOB_SECRET=my-own-secret-0123456789", "");
  EXPECT_EQ(secrets_in(given.output), (std::vector<std::string>{"my-own-secret-0123456789", "my-own-secret-0123456789"}))
      << given.output;
}

TEST(EmberRunSecret, SeveralNodesNeedOneGivenAndAPrivateFile) {
  const std::string base = std::string(EMBER_RUN_BIN) + " --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-port " +
                           std::to_string(free_port()) + " true";
  CommandResult r = run_command(kClean + base);
  EXPECT_FALSE(r.exited_zero()) << r.output;
  EXPECT_TRUE(has(r.output, "ember-run: the job spans 2 nodes, whose launchers must all give their ranks the same "
                            "secret"))
      << r.output;
  EXPECT_TRUE(has(r.output, "set EMBER_JOB_SECRET")) << r.output;
  const fs::path file = fs::temp_directory_path() / ("ember_run_secret_" + std::to_string(::getpid()));
  std::ofstream(file) << "a-secret-in-a-file-0123456789\n";
  ::chmod(file.c_str(), 0644);
  r = run_command(kClean + "EMBER_JOB_SECRET_FILE=" + file.string() + " " + base);
  EXPECT_FALSE(r.exited_zero()) << r.output;
  EXPECT_TRUE(has(r.output, "its mode 0644 lets other users read or change it: chmod 600")) << r.output;
  fs::remove(file);
}

}  // namespace
}  // namespace ember::comm
