// DDP training jobs under ember-run, with this binary's DdpJob.Worker as the program: a
// rank killed (SIGKILL) mid-training fails the job within the collective timeout + 10 s,
// ember-run naming the rank and the signal and the survivor's own error naming the
// collective; SIGTERM and SIGINT sent to ember-run reach every rank; a MASTER_PORT in
// use fails the job at once with the store's advice. After a job no process of it is
// left: each rank runs in its own process group, where it has started a helper process
// (as a data loader's workers would be) that only ember-run's clean-up stops.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "comm/ddp.h"
#include "comm/job_secret.h"
#include "comm/rendezvous.h"
#include "comm/tcp_store.h"
#include "tests/comm/ddp_test_util.h"
#include "tests/comm/process_util.h"

namespace ember::comm {
namespace {

using namespace testing;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr int kTimeoutS = 3;  // EMBER_COMM_TIMEOUT_S of the jobs that must fail within it

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The first line of `text` that begins with `start` (empty: none).
std::string line_of(const std::string& text, const std::string& start) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(start, 0) == 0) return line;
  return "";
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Written whole, then renamed: the test never reads half a file.
void write_file(const fs::path& p, const std::string& text) {
  std::ofstream(p.string() + ".tmp") << text;
  fs::rename(p.string() + ".tmp", p);
}

// The worker's file for a signal that reached it (set before the handler is installed).
char g_signal_file[4096];

// Async-signal-safe: writes the signal's number, then dies of it as the default would.
void record_signal(int sig) {
  const int fd = ::open(g_signal_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const char text[2] = {static_cast<char>('0' + sig / 10), static_cast<char>('0' + sig % 10)};
  if (fd >= 0) (void)!::write(fd, text, 2), ::close(fd);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// One rank of a job: DDP training of the MLP (tests/comm/ddp_test_util.h) until stopped.
// In EMBER_TEST_JOB_DIR it writes <rank>.pid as it starts, <rank>.training after its
// first step and <rank>.signal when SIGINT or SIGTERM reaches it. With
// EMBER_TEST_IGNORE_SIGTERM it trains on after ember-run's SIGTERM (as a trainer that
// saves a checkpoint first would), so that a dead peer shows in its own error rather than
// in its being stopped.
TEST(DdpJob, Worker) {
  if (!is_worker()) GTEST_SKIP() << "runs under ember-run, started by the other DdpJob tests";
  const fs::path dir = std::getenv("EMBER_TEST_JOB_DIR");
  const std::string rank = std::getenv("RANK");
  char program[] = "sleep", seconds[] = "300";
  char* helper_argv[] = {program, seconds, nullptr};
  pid_t helper = -1;
  ASSERT_EQ(::posix_spawnp(&helper, "sleep", nullptr, nullptr, helper_argv, environ), 0);
  write_file(dir / (rank + ".pid"), std::to_string(::getpid()));
  std::snprintf(g_signal_file, sizeof g_signal_file, "%s", (dir / (rank + ".signal")).c_str());
  ::signal(SIGINT, record_signal);
  ::signal(SIGTERM, std::getenv("EMBER_TEST_IGNORE_SIGTERM") ? SIG_IGN : record_signal);
  try {
    auto pg = init_process_group_from_env();
    auto model = make_model(1, kFloat32);
    DistributedDataParallel ddp(model, pg);
    optim::SGD opt(model->parameters(), {.lr = 0.01});
    for (int s = 0; s < 100000; ++s) {  // minutes: the test stops it long before
      auto [x, y] = batch(s % 16, 8, kFloat32);
      opt.zero_grad();
      loss_of(ddp.module(), x.narrow(0, 4 * pg->rank(), 4), y.narrow(0, 4 * pg->rank(), 4)).backward();
      opt.step();
      if (s == 0) write_file(dir / (rank + ".training"), "");
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "rank %s: %s\n", rank.c_str(), e.what());
    std::fflush(stderr);
    std::_Exit(3);  // a rank whose collective failed: its threads may still wait on the dead peer
  }
}

// The processes of process group `pgid` that still run (zombies, which nothing reaps in
// some containers, have ended).
int live_processes_in_group(pid_t pgid) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = read_file(e.path() / "stat");  // "pid (comm) state ppid pgrp ..."
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;  // it ended meanwhile
    std::istringstream rest(stat.substr(close + 1));
    char state = 0;
    long ppid = 0, pgrp = 0;
    if (rest >> state >> ppid >> pgrp && pgrp == pgid && state != 'Z') ++n;
  }
  return n;
}

// An ember-run job of two DdpJob.Worker ranks, its output in dir/out.
class Job {
 public:
  Job(const std::string& name, int port, std::vector<std::string> env) : dir_(fs::temp_directory_path() / name) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    env.push_back("EMBER_TEST_WORKER=1");
    env.push_back("EMBER_TEST_JOB_DIR=" + dir_.string());
    std::vector<std::string> args = {EMBER_RUN_BIN, "--nproc-per-node", "2", "--master-port", std::to_string(port),
                                     fs::read_symlink("/proc/self/exe").string(), "--gtest_filter=DdpJob.Worker"};
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    for (auto& e : env) envp.push_back(e.data());
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    ::posix_spawn_file_actions_init(&fa);
    ::posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, (dir_ / "out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
    const int rc = ::posix_spawn(&pid_, EMBER_RUN_BIN, &fa, nullptr, argv.data(), envp.data());
    ::posix_spawn_file_actions_destroy(&fa);
    EMBER_CHECK(rc == 0, "cannot start ember-run: ", std::strerror(rc));
  }
  ~Job() {
    if (pid_ > 0) {  // a failed test's job: what its ranks started, then ember-run (the ranks die with it)
      for (int r = 0; r < 2; ++r)
        if (pid_t p = pid_of(r); p > 0) ::kill(-p, SIGKILL);
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    fs::remove_all(dir_);
  }
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // Rank r's pid, once it has taken a training step; -1 if that takes over a minute.
  pid_t training_rank(int r) const {
    const fs::path training = dir_ / (std::to_string(r) + ".training");
    for (const auto until = Clock::now() + 60s; !fs::exists(training); std::this_thread::sleep_for(10ms))
      if (Clock::now() > until) return -1;
    return pid_of(r);
  }
  // ember-run's exit status if it ends within `limit`.
  std::optional<int> wait(Clock::duration limit) {
    for (const auto until = Clock::now() + limit; Clock::now() < until; std::this_thread::sleep_for(10ms)) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
    }
    return std::nullopt;
  }
  pid_t pid() const { return pid_; }
  std::string output() const { return read_file(dir_ / "out"); }
  // The pid rank r wrote as it started (-1: not yet).
  pid_t pid_of(int r) const {
    const fs::path p = dir_ / (std::to_string(r) + ".pid");
    return fs::exists(p) ? std::stoi(read_file(p)) : -1;
  }
  // The signal that reached rank r (0: none).
  int signal_of(int r) const { return std::atoi(read_file(dir_ / (std::to_string(r) + ".signal")).c_str()); }

 private:
  fs::path dir_;
  pid_t pid_ = -1;
};

// Once ember-run has ended, each rank's process group (its helper included) is gone;
// ember-run's SIGKILL to the groups takes effect at once, allow a second for it anyway.
void expect_nothing_left(const std::vector<pid_t>& ranks) {
  for (pid_t r : ranks) {
    if (r <= 0) continue;  // a rank that did not get as far as writing its pid
    int n = live_processes_in_group(r);
    for (const auto until = Clock::now() + 1s; n > 0 && Clock::now() < until; n = live_processes_in_group(r))
      std::this_thread::sleep_for(10ms);
    EXPECT_EQ(n, 0) << "processes left in the group of rank pid " << r;
  }
}

TEST(DdpJob, ARankKilledMidTrainingFailsTheJobWithinTheTimeout) {
  Job job("ember_job_kill_" + std::to_string(::getpid()), free_port(),
          {"EMBER_COMM_TIMEOUT_S=" + std::to_string(kTimeoutS), "EMBER_TEST_IGNORE_SIGTERM=1"});
  const std::vector<pid_t> ranks = {job.training_rank(0), job.training_rank(1)};
  ASSERT_TRUE(ranks[0] > 0 && ranks[1] > 0) << job.output();
  for (pid_t r : ranks) ASSERT_EQ(live_processes_in_group(r), 2) << "the rank and its helper";  // the check has teeth
  ASSERT_EQ(::kill(ranks[1], SIGKILL), 0);
  const std::optional<int> status = job.wait(std::chrono::seconds(kTimeoutS + 10));
  const std::string out = job.output();
  ASSERT_TRUE(status) << "ember-run still runs " << kTimeoutS << " + 10 s after the kill:\n" << out;
  EXPECT_EQ(*status, 1) << out;
  // Named first or, when ember-run found rank 0's error exit in the same sweep, beside it.
  EXPECT_TRUE(has(line_of(out, "ember-run: the job failed: "),
                  "rank 1 (local rank 1, pid " + std::to_string(ranks[1]) + ") was killed by signal 9 (Killed)"))
      << out;
  // The survivor meets the dead peer in its gradient all-reduce (at once, from the closed
  // connection, or at the timeout).
  EXPECT_TRUE(has(out, "[rank 0] rank 0: all_reduce (avg) of ")) << out;
  expect_nothing_left(ranks);
}

class DdpJobSignal : public ::testing::TestWithParam<int> {};

TEST_P(DdpJobSignal, ReachesEveryRank) {
  const int sig = GetParam();
  Job job("ember_job_signal_" + std::to_string(sig) + "_" + std::to_string(::getpid()), free_port(),
          {"EMBER_COMM_TIMEOUT_S=60"});  // the ranks end by the signal, not by a timeout
  const std::vector<pid_t> ranks = {job.training_rank(0), job.training_rank(1)};
  ASSERT_TRUE(ranks[0] > 0 && ranks[1] > 0) << job.output();
  ASSERT_EQ(::kill(job.pid(), sig), 0);
  // The ranks die of the signal at once; 15 s is ember-run's SIGKILL grace (5 s) and then some.
  const std::optional<int> status = job.wait(15s);
  const std::string out = job.output();
  ASSERT_TRUE(status) << out;
  EXPECT_EQ(*status, 1) << out;
  const std::string name = std::to_string(sig) + " (" + strsignal(sig) + ")";
  EXPECT_TRUE(has(out, "ember-run: got signal " + name + "; passing it to every rank")) << out;
  EXPECT_TRUE(has(out, "ember-run: the job failed: interrupted by signal " + name)) << out;
  for (int r = 0; r < 2; ++r) EXPECT_EQ(job.signal_of(r), sig) << "rank " << r << "\n" << out;
  expect_nothing_left(ranks);
}

INSTANTIATE_TEST_SUITE_P(TermAndInt, DdpJobSignal, ::testing::Values(SIGTERM, SIGINT),
                         [](const auto& info) { return info.param == SIGTERM ? "Sigterm" : "Sigint"; });

// Another job's store holds the port. Rank 0 cannot listen there, and rank 1, which
// reaches the other store, is refused by it (it does not hold that job's secret): each
// says so with the advice to choose another port, and the job ends at once.
TEST(DdpJob, AMasterPortInUseFailsAtOnce) {
  auto other = TcpStore::serve(0, {.secret = random_secret(), .timeout = 60s});
  const auto t0 = Clock::now();
  Job job("ember_job_port_" + std::to_string(::getpid()), other->port(), {"EMBER_COMM_TIMEOUT_S=60"});
  const std::optional<int> status = job.wait(30s);
  const std::string out = job.output();
  ASSERT_TRUE(status) << "the job waited for its timeout:\n" << out;
  EXPECT_EQ(*status, 1) << out;
  // Whichever rank fails first stops the other: at least one says why, with the advice.
  const bool rank0_said = has(out, "[rank 0] rank 0: TcpStore: cannot listen on port " + std::to_string(other->port()) +
                                       ": Address already in use (another job, or a previous one still exiting, holds "
                                       "it: choose another MASTER_PORT / --master-port)");
  const bool rank1_said = has(out, "[rank 1] rank 1: TcpStore: the store at 127.0.0.1:" +
                                       std::to_string(other->port()) + " refused this process") &&
                          has(out, "choose another MASTER_PORT / --master-port");
  EXPECT_TRUE(rank0_said || rank1_said) << out;
  // Either rank may fail first: rank 1 is refused by the other store's handshake at once,
  // possibly before rank 0 has even started. The one that ended by itself (it wrote its
  // pid before its rendezvous) left its helper to ember-run; the other may have been
  // stopped before it wrote its pid.
  const std::string failed = line_of(out, "ember-run: rank ");
  ASSERT_TRUE(has(failed, "exited with status 3; stopping the other ranks")) << out;
  const int first = failed.rfind("ember-run: rank 0 ", 0) == 0 ? 0 : 1;
  ASSERT_TRUE(has(failed, "pid " + std::to_string(job.pid_of(first)) + ")")) << out;
  expect_nothing_left({job.pid_of(0), job.pid_of(1)});
  std::printf("rank %d failed first, after %.2f s\n", first, std::chrono::duration<double>(Clock::now() - t0).count());
}

}  // namespace
}  // namespace ember::comm
