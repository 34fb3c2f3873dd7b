// ember-run: starts one process per device of a data-parallel job, as torchrun does.
//
//   ember-run --nproc-per-node N [--nnodes M --node-rank R --master-addr A --master-port P]
//             [--max-restarts K] PROGRAM ARGS...
//
// Each process gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, EMBER_RUN_ID and EMBER_RESTART_COUNT (comm/rendezvous.h reads them), and,
// unless set, EMBER_NUM_THREADS = cores / N so the processes do not fight over the CPU.
// Every output line is prefixed with its rank ("[rank 1] ..."; --no-prefix leaves it
// out). SIGINT and SIGTERM are forwarded. When one process fails (a non-zero exit or a
// signal), the others are stopped (SIGTERM, then SIGKILL after 5 s) and ember-run says
// which rank failed and how; it then restarts the whole group, up to --max-restarts
// times, and otherwise exits with status 1. Each rank runs in its own process group, so
// what it started is stopped with it; ranks die with ember-run (PR_SET_PDEATHSIG).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

struct Options {
  std::string nproc = "1";
  int nnodes = 1, node_rank = 0, master_port = 29500, max_restarts = 0;
  std::string master_addr = "127.0.0.1", run_id;
  bool no_prefix = false;
  std::vector<std::string> command;
};

struct Child {
  int rank = 0, local_rank = 0;
  pid_t pid = -1;
  int out = -1, err = -1;          // read ends of its stdout and stderr
  std::string out_buf, err_buf;    // a partial line
  bool running = false;
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

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "ended with wait status " + std::to_string(status);
}

bool start(Child& c, const Options& o, int nproc, int restart) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return false;
  const pid_t parent = ::getpid();
  c.pid = ::fork();
  if (c.pid < 0) return false;
  if (c.pid == 0) {
    ::setpgid(0, 0);  // its own process group: stopping a rank stops what it started
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::setenv("RANK", std::to_string(c.rank).c_str(), 1);
    ::setenv("WORLD_SIZE", std::to_string(nproc * o.nnodes).c_str(), 1);
    ::setenv("LOCAL_RANK", std::to_string(c.local_rank).c_str(), 1);
    ::setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
    ::setenv("GROUP_RANK", std::to_string(o.node_rank).c_str(), 1);
    ::setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
    ::setenv("MASTER_PORT", std::to_string(o.master_port).c_str(), 1);
    ::setenv("EMBER_RUN_ID", o.run_id.c_str(), 1);
    ::setenv("EMBER_RESTART_COUNT", std::to_string(restart).c_str(), 1);
    if (!std::getenv("EMBER_NUM_THREADS")) {
      const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
      ::setenv("EMBER_NUM_THREADS", std::to_string(std::max(1u, cores / static_cast<unsigned>(nproc))).c_str(), 1);
    }
    std::vector<char*> argv;
    for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "ember-run: cannot run '%s': %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  c.out = out[0];
  c.err = err[0];
  c.running = true;
  return true;
}

// Pumps output until every child has ended; returns the first failure's message (empty: all succeeded).
std::string supervise(std::vector<Child>& children, const Options& o) {
  std::string failure;
  auto deadline = std::chrono::steady_clock::time_point::max();
  bool killed = false;
  auto stop_all = [&](int sig) {
    for (auto& c : children)
      if (c.running) ::kill(-c.pid, sig);
  };
  auto all_ended = std::chrono::steady_clock::time_point::max();
  while (true) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Child*, bool>> owners;  // (child, is stdout)
    for (auto& c : children) {
      if (c.out >= 0) fds.push_back({c.out, POLLIN, 0}), owners.push_back({&c, true});
      if (c.err >= 0) fds.push_back({c.err, POLLIN, 0}), owners.push_back({&c, false});
    }
    ::poll(fds.data(), fds.size(), 100);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Child& c = *owners[i].first;
      const bool is_out = owners[i].second;
      int& fd = is_out ? c.out : c.err;
      std::string& buf = is_out ? c.out_buf : c.err_buf;
      const std::string prefix = o.no_prefix ? "" : "[rank " + std::to_string(c.rank) + "] ";
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
    int status;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      for (auto& c : children) {
        if (c.pid != pid) continue;
        c.running = false;
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && failure.empty()) {
          failure = "rank " + std::to_string(c.rank) + " (local rank " + std::to_string(c.local_rank) + ", pid " +
                    std::to_string(pid) + ") " + describe_status(status);
          std::fprintf(stderr, "ember-run: %s; stopping the other ranks\n", failure.c_str());
          stop_all(SIGTERM);
          deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        }
      }
    }
    if (g_signal) {
      const int sig = g_signal;
      g_signal = 0;
      std::fprintf(stderr, "ember-run: got signal %d (%s); passing it to every rank\n", sig, strsignal(sig));
      stop_all(sig);
      if (failure.empty()) failure = std::string("interrupted by signal ") + strsignal(sig);
      deadline = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(5));
    }
    if (!killed && std::chrono::steady_clock::now() > deadline) {
      stop_all(SIGKILL);
      killed = true;
    }
    bool running = false, open = false;
    for (auto& c : children) {
      running = running || c.running;
      open = open || c.out >= 0 || c.err >= 0;
    }
    if (!running && all_ended == std::chrono::steady_clock::time_point::max()) {
      all_ended = std::chrono::steady_clock::now();
      for (auto& c : children) ::kill(-c.pid, SIGKILL);  // what the ranks left behind
    }
    // Output still in the pipes is read for up to a second after the last rank ended.
    if (!running && (!open || std::chrono::steady_clock::now() - all_ended > std::chrono::seconds(1))) {
      for (auto& c : children) {
        for (int* fd : {&c.out, &c.err})
          if (*fd >= 0) ::close(*fd), *fd = -1;
      }
      return failure;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"ember-run: start one process per device of a data-parallel job (torchrun's conventions)"};
  app.add_option("--nproc-per-node", o.nproc, "processes on this node (a number; 'gpu': one per visible GPU)")
      ->capture_default_str();
  app.add_option("--nnodes", o.nnodes, "nodes in the job")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--node-rank", o.node_rank, "this node's index, 0 to nnodes-1")->capture_default_str();
  app.add_option("--master-addr", o.master_addr, "address of node 0 (where rank 0 serves the store)")
      ->capture_default_str();
  app.add_option("--master-port", o.master_port, "port of rank 0's store")->capture_default_str()->check(
      CLI::Range(1, 65535));
  app.add_option("--max-restarts", o.max_restarts, "restart the whole group this many times after a failure")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--run-id", o.run_id, "job id that prefixes the store's keys (default: ember-<port>)");
  app.add_flag("--no-prefix", o.no_prefix, "do not prefix output lines with the rank");
  app.prefix_command();  // everything from PROGRAM on belongs to it
  app.footer("PROGRAM ARGS...: the program each rank runs, and its arguments");
  try {
    app.parse(argc, argv);
    o.command = app.remaining();
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (o.command.empty()) {
    std::fprintf(stderr, "ember-run: no program to run (ember-run --nproc-per-node N PROGRAM ARGS...)\n");
    return 2;
  }
  int nproc = 0;
  if (o.nproc == "gpu") {
    std::fprintf(stderr, "ember-run: --nproc-per-node gpu: this build has no CUDA backend to count GPUs; "
                         "give a number\n");
    return 2;
  }
  try {
    size_t used = 0;
    nproc = std::stoi(o.nproc, &used);
    if (used != o.nproc.size()) nproc = 0;
  } catch (const std::exception&) {
  }
  if (nproc < 1) {
    std::fprintf(stderr, "ember-run: --nproc-per-node must be a positive number or 'gpu', got '%s'\n", o.nproc.c_str());
    return 2;
  }
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    std::fprintf(stderr, "ember-run: --node-rank %d is outside [0, %d) (--nnodes %d)\n", o.node_rank, o.nnodes,
                 o.nnodes);
    return 2;
  }
  if (o.run_id.empty()) o.run_id = "ember-" + std::to_string(o.master_port);
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  for (int restart = 0;; ++restart) {
    std::vector<Child> children(static_cast<size_t>(nproc));
    for (int l = 0; l < nproc; ++l) {
      children[l].local_rank = l;
      children[l].rank = o.node_rank * nproc + l;
      if (!start(children[l], o, nproc, restart)) {
        std::fprintf(stderr, "ember-run: cannot start rank %d: %s\n", children[l].rank, std::strerror(errno));
        for (auto& c : children)
          if (c.running) ::kill(-c.pid, SIGKILL);
        return 1;
      }
    }
    const std::string failure = supervise(children, o);
    if (failure.empty()) return 0;
    if (failure.rfind("interrupted", 0) == 0 || restart >= o.max_restarts) {
      std::fprintf(stderr, "ember-run: the job failed: %s%s\n", failure.c_str(),
                   o.max_restarts > 0 ? (" (after " + std::to_string(restart) + " restart(s))").c_str() : "");
      return 1;
    }
    std::fprintf(stderr, "ember-run: restarting the group (%d of %d)\n", restart + 1, o.max_restarts);
  }
}
