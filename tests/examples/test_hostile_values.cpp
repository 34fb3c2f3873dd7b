// Every flag of every program (the examples, the ports of PyTorch's examples, ember-run,
// ember-memviz), read from the program's own --help so that a new flag is covered when it
// is added, run with a table of hostile values (0, -1, huge, NaN, inf, empty, not a number,
// a directory, a missing file, a file without permission), and the environment variables
// with theirs. Each run must end by itself with a status below 128 (no signal, no uncaught
// exception), and either accept the value (the examples then stop at the empty data
// folder, or after checking their flags) or refuse it on one line of stderr that names
// the flag. A numeric flag's range, as --help shows it, is its
// documented meaning: its ends are accepted, the values beyond them refused.
//
// Fast: the programs stop before they load data (30 ms a run); runs go four at a time.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/runtime.h"
#include "tests/core/temp_dir.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct Outcome {
  int status = -1;  // the shell's: 128 + N when the program died of signal N
  std::string out, err;
};

// One option as --help lists it: "--epochs INT in [0, 1000000]=1".
struct Flag {
  std::string name;
  std::string type;  // "" for a switch
  bool ranged = false;
  std::string lo, hi;
};

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

std::vector<Flag> flags_of(const std::string& help) {
  std::vector<Flag> flags;
  const std::regex option(R"(^  (?:-[a-z],)?(--[a-z0-9-]+)(?: ([^ ].*?))?(?:  +.*)?$)");
  const std::regex range(R"(in \[([^,\]]+), ([^\]]+)\])");
  for (const std::string& l : lines(help)) {
    std::smatch m;
    if (!std::regex_match(l, m, option) || m[1] == "--help") continue;
    Flag f{m[1], m[2]};
    std::smatch r;
    if (std::regex_search(f.type, r, range)) f = {f.name, f.type, true, r[1], r[2]};
    flags.push_back(f);
  }
  return flags;
}

// Whether `v` is a value of the flag's documented range: a whole number (INT, UINT) or a
// finite number (FLOAT) from lo to hi, written plainly.
bool within(const Flag& f, const std::string& v) {
  if (v.empty()) return false;
  if (f.type.rfind("FLOAT", 0) == 0) {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    return *end == '\0' && std::isfinite(x) && x >= std::stod(f.lo) && x <= std::stod(f.hi);
  }
  const bool negative = v[0] == '-';
  if (v.find_first_not_of("0123456789", negative ? 1 : 0) != std::string::npos || v.size() > 20) return false;
  try {
    if (negative) return std::stoll(v) >= std::stoll(f.lo);
    const unsigned long long x = std::stoull(v);
    return x >= std::stoull(f.lo) && x <= std::stoull(f.hi);
  } catch (const std::out_of_range&) {
    return false;
  }
}

class HostileValues : public test::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    fs::create_directories(dir_ / "empty");  // no data: an accepted value stops there
    fs::create_directories(dir_ / "folder");
    write(path("locked"), "x");
    ::chmod(path("locked").c_str(), 0);
    fs::create_directories(dir_ / "locked-folder");
    ::chmod(path("locked-folder").c_str(), 0);
    fs::create_symlink("loop-b", dir_ / "loop-a");
    fs::create_symlink("loop-a", dir_ / "loop-b");
    ::chmod(dir_.c_str(), 0777);  // the runs, as nobody, write their output here
    // As root every file is readable: the runs drop to nobody's rights, as a user's would be.
    if (::geteuid() == 0 && fs::exists("/usr/bin/setpriv")) as_user_ = "/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups ";
  }

  // The table: each hostile value, as the command line gets it.
  std::vector<std::string> hostile() const {
    return {"0",   "-1",  "99999999999999999999", "2147483648", "nan",         "inf",          "-inf",
            "",    "abc", "1e3",                  "1.5",        path("folder"), path("missing"), path("locked"),
            path("locked-folder"), path("loop-a")};
  }

  // Runs `command` (a shell command line) to its end, at most 60 s.
  Outcome run(const std::string& command, int id) const {
    const std::string o = path("out." + std::to_string(id)), e = path("err." + std::to_string(id));
    const int st = std::system(("cd " + quote(dir_.string()) + " && timeout -s KILL 60 " + as_user_ + command + " >" +
                                quote(o) + " 2>" + quote(e) + " </dev/null")
                                   .c_str());
    Outcome r{WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), slurp(o), slurp(e)};
    fs::remove(o);
    fs::remove(e);
    return r;
  }

  // Runs every command, four at a time.
  std::vector<Outcome> run_all(const std::vector<std::string>& commands) const {
    std::vector<Outcome> out(commands.size());
    for (size_t i = 0; i < commands.size(); i += 4) {
      std::vector<std::future<Outcome>> batch;
      for (size_t j = i; j < std::min(commands.size(), i + 4); ++j)
        batch.push_back(std::async(std::launch::async, [&, j] { return run(commands[j], static_cast<int>(j)); }));
      for (size_t j = i; j < std::min(commands.size(), i + 4); ++j) out[j] = batch[j - i].get();
    }
    return out;
  }

  std::string help(const std::string& program) const {
    const Outcome r = run(program + " --help", 1000000);
    EXPECT_EQ(r.status, 0) << program << ": " << r.err;
    return r.out;
  }

  // The checks every run of `what` must pass; refused: whether it refused the value, by
  // naming `name` (a flag or a variable) on one line of stderr.
  static bool judge(const Outcome& r, const std::string& what, const std::string& name) {
    EXPECT_LT(r.status, 128) << what << ": killed or crashed\nstderr: " << r.err;
    EXPECT_FALSE(has(r.err, "terminate called") || has(r.err, "internal error")) << what << ": " << r.err;
    if (r.status == 0) return false;
    const auto errs = lines(r.err);
    EXPECT_GE(errs.size(), 1u) << what << ": failed without a message";
    const bool out_of_memory = has(r.err, "out of memory on ");
    if (!out_of_memory) EXPECT_EQ(errs.size(), 1u) << what << ": not one line:\n" << r.err;
    return has(r.err, name + ":") || has(r.err, name + "=") || has(r.err, name + " ");
  }

  std::string as_user_;
};

// The examples stop at the empty data folder when they accept every value, and refuse a
// numeric value outside its range naming the flag.
TEST_F(HostileValues, EveryFlagOfEveryProgram) {
  // ember-run's --nnodes at its top (65536) starts a job spanning nodes, which needs a
  // secret given, as a user would give one (docs/reliability.md, "Rendezvous").
  struct Secret {
    Secret() { ::setenv("EMBER_JOB_SECRET", "hostile-values-secret-0123", 1); }
    ~Secret() { ::unsetenv("EMBER_JOB_SECRET"); }
  } secret;
  struct Program {
    std::string bin, base;  // base: arguments that make an accepted run stop early
    std::string stops_at;   // what an accepted run says (beside a refusal of something else)
    std::vector<std::string> skip_hi;  // ranges whose top is not worth running here
    bool shares_flags = false;  // the previous program's flags are its own too (examples/common/flags.cpp)
  };
  std::vector<Program> programs = {
      {EMBER_MLP_BIN, "--device cpu --data " + path("empty"), "load_fashion_mnist: neither", {}},
      {EMBER_CNN_BIN, "--device cpu --data " + path("empty"), "load_fashion_mnist: neither", {}, true},
      {EMBER_GPT_BIN, "--device cpu --data " + path("empty"), "gpt: --data", {}},
      {EMBER_HELLO_BIN, "--device cpu", "", {}},
      {EMBER_MEMVIZ_BIN, path("missing.json") + " -o " + path("out.svg"), "memviz: cannot open", {}},
      // 1024 ranks of /bin/true would run, but are not worth the time; --node-rank's top
      // needs --nnodes 65536 (it is refused, naming both, with one node).
      {EMBER_RUN_BIN, "--nproc-per-node 1 /bin/true", "", {"--nproc-per-node", "--node-rank"}},
  };
  // The ports of PyTorch's examples (examples/pytorch): those that read Fashion-MNIST stop
  // at the empty folder, as the MLP does; the others stop after checking their flags
  // (--check-flags). Each shares the house flags of examples/pytorch/common.h with the port
  // before it, so only its own are run again.
  const std::string pt = std::string(EMBER_PT_BIN_DIR) + "/ember_pt_";
  for (const char* name : {"mnist", "cpp_mnist", "vae", "cpp_dcgan", "dcgan", "mnist_rnn", "siamese_network",
                           "super_resolution", "vision_transformer", "imagenet"})
    programs.push_back({pt + name, "--device cpu --data " + path("empty"), "load_fashion_mnist: neither", {},
                        programs.back().bin.rfind(pt, 0) == 0});
  for (const char* name : {"regression", "cpp_autograd", "time_sequence_prediction", "word_language_model"})
    programs.push_back({pt + name, "--device cpu --check-flags", "", {}, true});
  size_t flags_seen = 0, runs = 0;
  std::vector<Flag> previous;
  for (const Program& p : programs) {
    std::vector<Flag> flags = flags_of(help(p.bin));
    ASSERT_FALSE(flags.empty()) << p.bin;
    flags_seen += flags.size();
    const std::vector<Flag> all = flags;
    if (p.shares_flags)  // the same parser: only what differs is run again
      std::erase_if(flags, [&](const Flag& f) {
        return std::any_of(previous.begin(), previous.end(),
                           [&](const Flag& g) { return g.name == f.name && g.type == f.type; });
      });
    previous = all;
    std::vector<std::string> commands, whats;
    std::vector<std::pair<const Flag*, std::string>> cases;  // flag and value of each command
    auto add = [&](const Flag& f, const std::string& value) {
      // The flag replaces its own occurrence in base (ember-run: before PROGRAM).
      std::string base = p.base;
      const auto at = base.find(f.name + " ");
      if (at != std::string::npos) base.erase(at, base.find(' ', at + f.name.size() + 1) - at + 1);
      const bool positional_last = p.bin == EMBER_RUN_BIN;
      const std::string arg = f.name + " " + quote(value);
      commands.push_back(p.bin + " " + (positional_last ? arg + " " + base : base + " " + arg));
      whats.push_back(fs::path(p.bin).filename().string() + " " + f.name + " '" + value + "'");
      cases.emplace_back(&f, value);
    };
    for (const Flag& f : flags) {
      if (f.type.empty()) continue;  // a switch takes no value
      for (const std::string& v : hostile()) add(f, v);
      if (f.ranged) {
        add(f, f.lo);
        if (std::find(p.skip_hi.begin(), p.skip_hi.end(), f.name) == p.skip_hi.end()) add(f, f.hi);
        // One past each end, in the flag's own terms.
        if (f.type.rfind("INT", 0) == 0 || f.type.rfind("UINT", 0) == 0) {
          if (f.lo != "0" || f.type.rfind("INT", 0) == 0) add(f, f.lo == "0" ? "-1" : std::to_string(std::stoll(f.lo) - 1));
          add(f, f.hi == "18446744073709551615" ? "18446744073709551616" : std::to_string(std::stoll(f.hi) + 1));
        } else {
          add(f, std::to_string(std::stod(f.hi) * 1.5 + 1));
        }
      }
    }
    // A flag with no value, and one the program does not know.
    for (const Flag& f : flags)
      if (!f.type.empty()) {
        commands.push_back(p.bin + " " + (p.bin == EMBER_RUN_BIN ? f.name + " " + p.base : p.base + " " + f.name));
        whats.push_back(fs::path(p.bin).filename().string() + " " + f.name + " (no value)");
        cases.emplace_back(nullptr, "");
        break;
      }
    commands.push_back(p.bin + " --no-such-flag 3 " + p.base);
    whats.push_back(fs::path(p.bin).filename().string() + " --no-such-flag");
    cases.emplace_back(nullptr, "");

    const std::vector<Outcome> outcomes = run_all(commands);
    runs += outcomes.size();
    for (size_t i = 0; i < outcomes.size(); ++i) {
      const Outcome& r = outcomes[i];
      const Flag* f = cases[i].first;
      const bool refused = judge(r, whats[i], f ? f->name : "--");
      if (!f) {
        EXPECT_NE(r.status, 0) << whats[i];
        continue;
      }
      if (!f->ranged) {
        // A text value: accepted, or refused with a message (judge checked its form).
        if (r.status != 0 && !refused && !p.stops_at.empty())
          EXPECT_TRUE(has(r.err, p.stops_at) || has(r.err, cases[i].second)) << whats[i] << ": " << r.err;
        continue;
      }
      // A numeric value: its range decides.
      const std::string& v = cases[i].second;
      const bool in_range = within(*f, v);
      if (in_range)
        EXPECT_FALSE(refused) << whats[i] << ": a value of the documented range was refused: " << r.err;
      else if (!(f->name == "--nproc-per-node" && v == "gpu"))
        EXPECT_TRUE(refused && r.status != 0) << whats[i] << " (range [" << f->lo << ", " << f->hi
                                              << "]) was not refused naming the flag: status " << r.status << ", "
                                              << r.err;
    }
  }
  RecordProperty("flags", static_cast<int>(flags_seen));
  RecordProperty("runs", static_cast<int>(runs));
  EXPECT_GE(flags_seen, 45u) << "fewer flags than the programs had when this test was written";
}

// The variables ember reads, each with the hostile values: a bad one is an error naming
// the variable (and its range), in the program that reads it first.
TEST_F(HostileValues, EveryEnvironmentVariable) {
  struct Var {
    std::string name, program;
    std::vector<std::string> accepted;  // hostile values that mean something documented
  };
  const std::string hello = std::string(EMBER_HELLO_BIN) + " --device cpu";
  const std::string mlp = std::string(EMBER_MLP_BIN) + " --device cpu --data " + path("empty");
  write(path("text.txt"), std::string(2000, 'a') + "To be, or not to be, that is the question.\n");
  const std::string gpt = std::string(EMBER_GPT_BIN) + " --device cpu --data " + path("text.txt") +
                          " --n-layer 1 --n-head 1 --n-embd 8 --block-size 8 --batch-size 2 --iters 2 --eval-iters 1 "
                          "--threads 1";
  std::vector<Var> vars = {
      {"EMBER_NUM_THREADS", hello, {}},
      {"EMBER_HOST_MEMORY_LIMIT", hello, {"2147483648", "99999", "1000"}},  // bytes: a small cap runs out, with the report
      {"EMBER_MEMORY_HISTORY", hello, {"0", "99999", "1000"}},  // 0: off
      {"EMBER_ALLOC_CONF", hello, {""}},                                         // empty: the defaults
      {"EMBER_COMM_TIMEOUT_S", mlp, {"99999", "1000"}},
      // The kernel variants (kernels/cpu/variant.h): refused by ember::init(); empty is unset.
      {"EMBER_GEMM", hello, {""}},
      {"EMBER_CONV", hello, {""}},
      // Read at each attention call: a tiny GPT trains two steps on a short text.
      {"EMBER_ATTENTION", gpt, {""}},
  };
  if (cuda_backend_built())  // the CUDA backend's own variables, read when it is built
    for (const char* name : {"EMBER_RNN", "EMBER_FLASH", "EMBER_SPMM"}) vars.push_back({name, hello, {""}});
  std::vector<std::string> commands, whats;
  std::vector<std::pair<const Var*, std::string>> cases;
  // Whole numbers a parser takes, too many for what they count (99999 threads ended in
  // std::system_error).
  std::vector<std::string> values = hostile();
  values.insert(values.end(), {"99999", "1000"});
  for (const Var& var : vars)
    for (const std::string& v : values) {
      commands.push_back("env " + var.name + "=" + quote(v) + " " + var.program);
      whats.push_back(var.name + "='" + v + "'");
      cases.emplace_back(&var, v);
    }
  const std::vector<Outcome> outcomes = run_all(commands);
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const Var& var = *cases[i].first;
    const bool refused = judge(outcomes[i], whats[i], var.name);
    const bool accepted = std::find(var.accepted.begin(), var.accepted.end(), cases[i].second) != var.accepted.end();
    if (accepted)
      EXPECT_FALSE(refused) << whats[i] << ": " << outcomes[i].err;
    else
      EXPECT_TRUE(refused) << whats[i] << " was not refused naming the variable: " << outcomes[i].err;
  }
}

}  // namespace
}  // namespace ember
