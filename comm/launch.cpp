// Starting, watching and stopping the workers of a job on this node (comm/launch.h).
//
// Note [Forking with threads]: fork copies only the calling thread. Between fork and the
// worker's code the child does only async-signal-safe work (setpgid, prctl, dup2,
// close, sigaction, and pointing `environ` at an environment built before the fork), so
// the launcher itself is safe in a process with threads. What the worker then runs is
// not: a lock another thread held at the fork (a thread pool's, a logger's) stays locked
// in the child forever, and a pool's worker threads are gone there. ember-run's workers
// exec at once, so this does not touch them; comm::spawn runs user code in the child,
// hence its rule: call it before starting threads, as Python's fork start method asks.
// glibc keeps malloc usable across fork, and OpenBLAS shuts its threads down in a
// pthread_atfork handler and starts them again on demand. stdio is flushed before the
// fork, so buffered output is not written twice (once by the parent, once by a child).
#include "comm/launch.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>
#include <utility>
#include <vector>

#include "base/error.h"
#include "comm/job_secret.h"

extern char** environ;

namespace ember::comm {
namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

struct Worker {
  int rank = 0, local_rank = 0;
  pid_t pid = -1;
  int out = -1, err = -1;        // read ends of its stdout and stderr
  std::string out_buf, err_buf;  // a partial line
  bool running = false;
  std::vector<std::string> env;  // NAME=VALUE, built before the fork
  std::vector<char*> envp;
};

// Writes the complete lines of `buf` to `fd`, each prefixed; keeps the partial last line.
void flush_lines(std::string& buf, int fd, const std::string& prefix, bool all) {
  size_t start = 0, nl;
  std::string out;
  while ((nl = buf.find('\n', start)) != std::string::npos) {
    out += prefix + buf.substr(start, nl - start + 1);
    start = nl + 1;
  }
  buf.erase(0, start);
  if (all && !buf.empty()) {
    out += prefix + buf + "\n";
    buf.clear();
  }
  if (!out.empty()) (void)!::write(fd, out.data(), out.size());
}

// Note [The launcher's secret]. Every node's launcher must give its ranks the same
// secret, which each store connection proves (comm/job_secret.h): the user's if given
// (EMBER_JOB_SECRET or EMBER_JOB_SECRET_FILE, checked here so a bad one fails before any
// rank starts); else, on one node, a fresh random one for each call, so for each job and
// each restart; else one derived from the scheduler's ids, the same on every node of one
// srun or mpirun (OpenMPI's first when mpirun started this launcher); else an error.
std::string launcher_secret(const LaunchOptions& o) {
  if (auto s = user_job_secret(process_env)) return s->value;
  if (o.nnodes == 1) return random_secret();
  if (auto s = scheduler_job_secret(process_env, process_env("OMPI_COMM_WORLD_SIZE").has_value())) return s->value;
  EMBER_FAIL(o.name, ": the job spans ", o.nnodes, " nodes, whose launchers must all give their ranks the same "
             "secret for rank 0's store, and none is given: set EMBER_JOB_SECRET (the same on every node; ",
             kMinSecretLength, " characters or more) or EMBER_JOB_SECRET_FILE (a file only you can read), or start "
             "the launchers under Slurm (srun) or OpenMPI (mpirun), whose job ids give one. See docs/reliability.md, "
             "\"Rendezvous\"");
}

// This process's environment with the job's variables set (replacing any of the same name).
void build_env(Worker& w, const LaunchOptions& o, int nproc, const std::string& secret) {
  std::vector<std::pair<std::string, std::string>> vars = {
      {"RANK", std::to_string(w.rank)},
      {"WORLD_SIZE", std::to_string(nproc * o.nnodes)},
      {"LOCAL_RANK", std::to_string(w.local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
      {"GROUP_RANK", std::to_string(o.node_rank)},
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(o.master_port)},
      {"EMBER_RUN_ID", o.run_id},
      {"EMBER_RESTART_COUNT", std::to_string(o.restart)},
      {"EMBER_MAX_RESTARTS", std::to_string(o.max_restarts)},
      {"EMBER_JOB_SECRET", secret}};  // in the environment, never on a command line `ps` shows
  if (!std::getenv("EMBER_NUM_THREADS")) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    vars.emplace_back("EMBER_NUM_THREADS", std::to_string(std::max(1u, cores / static_cast<unsigned>(nproc))));
  }
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    if (std::none_of(vars.begin(), vars.end(), [&](const auto& v) { return v.first == name; }))
      w.env.push_back(entry);
  }
  for (const auto& [name, value] : vars) w.env.push_back(name + "=" + value);
  for (auto& e : w.env) w.envp.push_back(e.data());
  w.envp.push_back(nullptr);
}

// Forks worker `w`; false (errno set) when the pipes or the fork fail.
bool start(Worker& w, const WorkerMain& main) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return false;
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]), ::close(out[1]);
    return false;
  }
  std::fflush(nullptr);  // Note [Forking with threads]: nothing buffered is written twice
  std::cout.flush(), std::cerr.flush();
  const pid_t parent = ::getpid();
  // SIGINT and SIGTERM wait until the child has its default handlers back (a stop sent
  // right after the fork would otherwise reach the launcher's forwarding handler there).
  sigset_t stop_signals, saved_mask;
  ::sigemptyset(&stop_signals);
  ::sigaddset(&stop_signals, SIGINT);
  ::sigaddset(&stop_signals, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &stop_signals, &saved_mask);
  w.pid = ::fork();
  if (w.pid < 0) {
    const int saved = errno;
    ::pthread_sigmask(SIG_SETMASK, &saved_mask, nullptr);
    for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
    errno = saved;
    return false;
  }
  if (w.pid == 0) {  // only async-signal-safe calls until main()
    ::setpgid(0, 0);  // its own process group: stopping a rank stops what it started
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    for (int fd : {out[0], out[1], err[0], err[1]})
      if (fd > STDERR_FILENO) ::close(fd);
    struct sigaction dfl{};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(SIGINT, &dfl, nullptr);
    ::sigaction(SIGTERM, &dfl, nullptr);
    ::pthread_sigmask(SIG_SETMASK, &saved_mask, nullptr);
    environ = w.envp.data();
    const int code = main(w.local_rank);
    std::cout.flush(), std::cerr.flush();
    std::fflush(nullptr);
    ::_exit(code);
  }
  ::pthread_sigmask(SIG_SETMASK, &saved_mask, nullptr);
  ::setpgid(w.pid, w.pid);  // as the child does: a stop sent before it ran reaches it
  ::close(out[1]);
  ::close(err[1]);
  w.out = out[0];
  w.err = err[0];
  w.running = true;
  return true;
}

// Reads what is ready on the workers' pipes and writes it out, line by line, prefixed.
void pump(std::vector<Worker>& workers, const LaunchOptions& o) {
  std::vector<pollfd> fds;
  std::vector<std::pair<Worker*, bool>> owners;  // (worker, is stdout)
  for (auto& w : workers) {
    if (w.out >= 0) fds.push_back({w.out, POLLIN, 0}), owners.push_back({&w, true});
    if (w.err >= 0) fds.push_back({w.err, POLLIN, 0}), owners.push_back({&w, false});
  }
  ::poll(fds.data(), fds.size(), 100);
  for (size_t i = 0; i < fds.size(); ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    Worker& w = *owners[i].first;
    const bool is_out = owners[i].second;
    int& fd = is_out ? w.out : w.err;
    std::string& buf = is_out ? w.out_buf : w.err_buf;
    const std::string prefix = o.prefix_output ? "[rank " + std::to_string(w.rank) + "] " : "";
    char chunk[65536];
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n > 0) {
      buf.append(chunk, static_cast<size_t>(n));
      flush_lines(buf, is_out ? STDOUT_FILENO : STDERR_FILENO, prefix, false);
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      flush_lines(buf, is_out ? STDOUT_FILENO : STDERR_FILENO, prefix, true);
      ::close(fd);
      fd = -1;
    }
  }
}

// Pumps output until every worker has ended; stops the others after the first failure.
LaunchResult supervise(std::vector<Worker>& workers, const LaunchOptions& o) {
  LaunchResult result;
  auto deadline = Clock::time_point::max(), all_ended = Clock::time_point::max();
  bool killed = false, stopping = false;
  auto stop_all = [&](int sig) {
    for (auto& w : workers)
      if (w.running) ::kill(-w.pid, sig);
  };
  while (true) {
    pump(workers, o);
    // Every failure one sweep finds is named: a rank's death fails its peers' collectives
    // within microseconds, so that sweep may find them too, and which came first is
    // unknown (naming the lowest rank only could hide the killed rank behind its peer).
    bool failed_now = false;
    for (auto& w : workers) {
      int status = 0;
      if (!w.running) continue;
      const pid_t got = ::waitpid(w.pid, &status, WNOHANG);
      const int wait_errno = errno;
      if (got == 0 || (got < 0 && wait_errno == EINTR)) continue;
      w.running = false;
      if (got == w.pid && WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      if (stopping) continue;  // the stop ended it
      result.failure += std::string(result.failure.empty() ? "" : "; ") + "rank " + std::to_string(w.rank) +
                        " (local rank " + std::to_string(w.local_rank) + ", pid " + std::to_string(w.pid) + ") " +
                        (got == w.pid ? describe_wait_status(status)
                                      : std::string("cannot be waited for (") + std::strerror(wait_errno) +
                                            "; is SIGCHLD ignored?)");
      if (result.failed_rank < 0) result.failed_rank = w.rank;
      failed_now = true;
    }
    if (failed_now) {
      std::fprintf(stderr, "%s: %s; stopping the other ranks\n", o.name.c_str(), result.failure.c_str());
      stop_all(SIGTERM);
      deadline = Clock::now() + o.stop_grace;
      stopping = true;
    }
    if (g_signal) {
      const int sig = g_signal;
      g_signal = 0;
      std::fprintf(stderr, "%s: got signal %d (%s); passing it to every rank\n", o.name.c_str(), sig, strsignal(sig));
      stop_all(sig);
      stopping = true;
      result.interrupted = true;
      if (result.failure.empty())
        result.failure = "interrupted by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
      deadline = std::min(deadline, Clock::now() + o.stop_grace);
    }
    if (!killed && Clock::now() > deadline) {
      stop_all(SIGKILL);
      killed = true;
    }
    const bool running = std::any_of(workers.begin(), workers.end(), [](const Worker& w) { return w.running; });
    const bool open =
        std::any_of(workers.begin(), workers.end(), [](const Worker& w) { return w.out >= 0 || w.err >= 0; });
    if (!running && all_ended == Clock::time_point::max()) {
      all_ended = Clock::now();
      for (auto& w : workers) ::kill(-w.pid, SIGKILL);  // what the ranks left behind
    }
    // Output still in the pipes is read for up to a second after the last rank ended.
    if (!running && (!open || Clock::now() - all_ended > std::chrono::seconds(1))) {
      for (auto& w : workers)
        for (int* fd : {&w.out, &w.err})
          if (*fd >= 0) ::close(*fd), *fd = -1;
      return result;
    }
  }
}

// Installs the forwarding handlers for SIGINT and SIGTERM while it lives.
class SignalForwarding {
 public:
  explicit SignalForwarding(bool on) : on_(on) {
    if (!on_) return;
    g_signal = 0;
    struct sigaction sa{};
    sa.sa_handler = on_signal;
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~SignalForwarding() {
    if (!on_) return;
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;

 private:
  bool on_;
  struct sigaction old_int_{}, old_term_{};
};

}  // namespace

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EMBER_CHECK(fd >= 0, "free_port: socket: ", std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  const int saved = errno;
  ::close(fd);
  EMBER_CHECK(ok, "free_port: cannot bind a loopback port: ", std::strerror(saved));
  return ntohs(a.sin_port);
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "ended with wait status " + std::to_string(status);
}

LaunchResult launch_workers(int nproc, const LaunchOptions& options, const WorkerMain& worker) {
  EMBER_CHECK(nproc >= 1, "launch_workers: nproc must be at least 1, got ", nproc);
  EMBER_CHECK(options.nnodes >= 1 && options.node_rank >= 0 && options.node_rank < options.nnodes,
              "launch_workers: node_rank ", options.node_rank, " is outside [0, ", options.nnodes, ")");
  LaunchOptions o = options;
  if (o.master_addr.empty()) {
    const char* addr = std::getenv("MASTER_ADDR");
    o.master_addr = addr && *addr ? addr : "127.0.0.1";
  }
  if (o.master_port == 0) {
    const char* port = std::getenv("MASTER_PORT");
    o.master_port = port && *port ? std::atoi(port) : free_port();
    EMBER_CHECK(o.master_port >= 1 && o.master_port <= 65535, "launch_workers: MASTER_PORT='", port,
                "' is not a port number");
  }
  if (o.run_id.empty()) o.run_id = "ember-" + std::to_string(o.master_port);
  const std::string secret = launcher_secret(o);

  std::vector<Worker> workers(static_cast<size_t>(nproc));
  for (int l = 0; l < nproc; ++l) {
    workers[l].local_rank = l;
    workers[l].rank = o.node_rank * nproc + l;
    build_env(workers[l], o, nproc, secret);
  }
  SignalForwarding forwarding(o.forward_signals);
  for (auto& w : workers) {
    if (start(w, worker)) continue;
    const int saved = errno;
    for (auto& c : workers) {
      if (!c.running) continue;
      ::kill(-c.pid, SIGKILL);
      ::waitpid(c.pid, nullptr, 0);
      for (int fd : {c.out, c.err}) ::close(fd);
    }
    throw Error(o.name + ": cannot start rank " + std::to_string(w.rank) + ": " + std::strerror(saved));
  }
  return supervise(workers, o);
}

void spawn(int nprocs, const std::function<void(int local_rank)>& fn, const LaunchOptions& options) {
  EMBER_CHECK(nprocs >= 1, "spawn: nprocs must be at least 1, got ", nprocs);
  LaunchOptions o = options;
  if (o.name == "ember") o.name = "comm::spawn";
  const LaunchResult r = launch_workers(nprocs, o, [&](int local_rank) {
    try {
      fn(local_rank);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "comm::spawn: local rank %d failed: %s\n", local_rank, e.what());
    } catch (...) {
      std::fprintf(stderr, "comm::spawn: local rank %d failed: an exception that is not a std::exception\n",
                   local_rank);
    }
    return 1;
  });
  EMBER_CHECK(r.ok(), "spawn: ", r.failure, r.interrupted ? "" : "; the other ranks were stopped");
}

}  // namespace ember::comm
