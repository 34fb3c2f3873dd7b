// Rendezvous from the environment (comm/rendezvous.h).
#include "comm/rendezvous.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "base/error.h"
#include "comm/tcp_store.h"

namespace ember::comm {

namespace {

int parse_int(const std::string& name, const std::string& v, int lo, int hi) {
  long long x = 0;
  size_t used = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  EMBER_CHECK(used == v.size() && !v.empty(), "rendezvous: ", name, "='", v, "' is not an integer");
  EMBER_CHECK(x >= lo && x <= hi, "rendezvous: ", name, "=", x, " is outside [", lo, ", ", hi, "]");
  return static_cast<int>(x);
}

struct Family {
  const char* launcher;
  const char *rank, *size, *local_rank, *local_size;
};

bool is_loopback(const std::string& addr) { return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0; }

// This node's count in SLURM_TASKS_PER_NODE, which lists every node's, runs compressed:
// "2(x3),1" is 2, 2, 2 and 1. Nodes that differ need SLURM_NODEID to tell which is this one.
int slurm_tasks_on_this_node(const std::string& list, const EnvLookup& env, int world_size) {
  std::vector<int> counts;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = list.find(',', at);
    const std::string item = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    const size_t open = item.find("(x");
    const int count = parse_int("SLURM_TASKS_PER_NODE", item.substr(0, open), 1, world_size);
    int repeat = 1;
    if (open != std::string::npos) {
      EMBER_CHECK(item.back() == ')', "rendezvous: cannot read SLURM_TASKS_PER_NODE='", list, "'");
      repeat = parse_int("SLURM_TASKS_PER_NODE", item.substr(open + 2, item.size() - open - 3), 1, world_size);
    }
    EMBER_CHECK(counts.size() + repeat <= static_cast<size_t>(world_size), "rendezvous: SLURM_TASKS_PER_NODE='",
                list, "' lists more nodes than SLURM_NTASKS=", world_size, " has tasks");
    counts.insert(counts.end(), repeat, count);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  if (std::all_of(counts.begin(), counts.end(), [&](int c) { return c == counts[0]; })) return counts[0];
  const auto node = env("SLURM_NODEID");
  EMBER_CHECK(node.has_value(), "rendezvous: SLURM_TASKS_PER_NODE='", list,
              "' gives the nodes different task counts, and SLURM_NODEID, which says which node this is, is not set");
  return counts[parse_int("SLURM_NODEID", *node, 0, static_cast<int>(counts.size()) - 1)];
}

// Whether the job can be known to run on this one node, so that a launcher's missing
// local rank and size follow from the global ones: one process, or rank 0's address is
// this machine (MASTER_ADDR unset or loopback; under Slurm, a one-node allocation).
bool on_one_node(const LaunchInfo& info, const EnvLookup& env) {
  if (info.world_size == 1) return true;
  if (auto addr = env("MASTER_ADDR")) return is_loopback(*addr);
  if (info.launcher != std::string("slurm")) return true;
  for (const char* name : {"SLURM_NNODES", "SLURM_JOB_NUM_NODES"})
    if (auto n = env(name)) return *n == "1";
  return false;
}

// Note [Local rank and size]. They choose each process's device (cuda:LOCAL_RANK) and
// say whether the job spans nodes, so a wrong default would put two processes on one GPU
// or skip MASTER_ADDR's check. Every launcher sets both (torchrun, ember-run, mpirun,
// srun); when one is missing it follows from the global rank and size only on one node.
void read_local(LaunchInfo& info, const Family& f, const EnvLookup& env) {
  const bool one_node = on_one_node(info, env);
  const auto ls = env(f.local_size);
  if (ls) {
    info.local_world_size = info.launcher == std::string("slurm")
                                ? slurm_tasks_on_this_node(*ls, env, info.world_size)
                                : parse_int(f.local_size, *ls, 1, info.world_size);
  } else {
    const auto addr = env("MASTER_ADDR");
    EMBER_CHECK(one_node, "rendezvous: ", f.local_size, " is not set and the ", info.world_size,
                " ranks may span several nodes (",
                addr ? "rank 0 is at MASTER_ADDR=" + *addr + ", not this machine's loopback"
                     : std::string("SLURM_NNODES does not say the allocation has one node"),
                "), so it cannot be taken as ", f.size, ": set ", f.local_size, " and ", f.local_rank, " (",
                f.launcher, " sets both)");
    info.local_world_size = info.world_size;
  }
  if (auto lr = env(f.local_rank)) {
    info.local_rank = parse_int(f.local_rank, *lr, 0, info.world_size - 1);
  } else {
    EMBER_CHECK(info.local_world_size == info.world_size, "rendezvous: ", f.local_rank, " is not set, and ",
                f.local_size, "=", info.local_world_size, " of ", f.size, "=", info.world_size,
                " (several nodes) means it is not ", f.rank, ": set it (", f.launcher, " does)");
    info.local_rank = info.rank;
  }
  EMBER_CHECK(info.local_rank < info.local_world_size, "rendezvous: ", f.local_rank, "=", info.local_rank,
              " must be below ", f.local_size, "=", info.local_world_size);
  EMBER_CHECK(info.local_world_size < info.world_size || info.local_rank == info.rank, "rendezvous: ", f.local_rank,
              "=", info.local_rank, " differs from ", f.rank, "=", info.rank, ", so the ranks span several nodes, yet ",
              f.local_size, ls ? "=" + *ls : std::string(" (not set)"), " puts all ", info.world_size,
              " on this one");
}

// Note [One job per store prefix]. Two jobs given the same MASTER_ADDR, MASTER_PORT and
// job id (ember-run's default id is "ember-<port>") would meet in the same keys: the
// second job's rank 0 cannot listen on the port ("port in use"), but its other ranks, on
// that node before ember-run stops them or on other nodes, reach the first job's store
// and would add to its keys (the count of its groups, their join keys). So each rank first
// claims its rank number under the job's prefix, and finding it held by another process
// is an error, before this one writes anything else there.
void claim_rank(Store& store, const LaunchInfo& info) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "?");
  const std::string me = std::string(host) + " pid " + std::to_string(::getpid());
  const std::string holder = store.compare_set("rank/" + std::to_string(info.rank), "", me);
  EMBER_CHECK(holder == me, "rendezvous: rank ", info.rank, " of job '", info.job_id, "' (restart ", info.restart,
              ") already joined the store at ", info.master_addr, ":", info.master_port, " (", holder,
              "): another job uses the same address, port and job id; give each job its own MASTER_PORT "
              "(--master-port) or EMBER_RUN_ID (--run-id)");
}

// The secret every connection to the job's store proves (comm/job_secret.h): the user's,
// else the scheduler's ids; on one node, else this user's id and the job id (the same in
// every rank started by hand with one EMBER_RUN_ID); on several nodes, an error.
JobSecret job_secret(const LaunchInfo& info, const EnvLookup& env) {
  if (auto s = user_job_secret(env)) return *s;
  if (auto s = scheduler_job_secret(env, info.launcher == std::string("openmpi"))) return *s;
  EMBER_CHECK(info.local_world_size == info.world_size, "rendezvous: the ", info.world_size,
              " ranks span several nodes (", info.local_world_size,
              " on this one), and no secret admits them to rank 0's store: set EMBER_JOB_SECRET (the same on every "
              "node; ", kMinSecretLength, " characters or more) or EMBER_JOB_SECRET_FILE (a file only you can read), or "
              "start them under Slurm (srun) or OpenMPI (mpirun), whose job ids give one. See docs/reliability.md, "
              "\"Rendezvous\"");
  return JobSecret{"ember-derived/uid/" + std::to_string(::geteuid()) + "/" + info.job_id,
                   "derived from this user's id and the job id '" + info.job_id + "'", true};
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry: up to a comma outside brackets.
  std::string first;
  int depth = 0;
  for (char c : nodelist) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
    first += c;
  }
  const size_t open = first.find('[');
  if (open == std::string::npos) return first;
  const size_t end = first.find_first_of(",-]", open + 1);
  EMBER_CHECK(end != std::string::npos && end > open + 1, "rendezvous: cannot read the node list SLURM_JOB_NODELIST='",
              nodelist, "'");
  return first.substr(0, open) + first.substr(open + 1, end - open - 1);
}

LaunchInfo launch_info_from_env(const EnvLookup& env) {
  LaunchInfo info;
  static const Family families[] = {
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
      {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_TASKS_PER_NODE"},
  };
  const Family* chosen = nullptr;
  // Set by torchrun or ember-run for the processes they start (a person sets no restart count).
  const bool started_by_torchrun = env("TORCHELASTIC_RESTART_COUNT") || env("EMBER_RESTART_COUNT");
  for (const Family& f : families) {
    const auto rank = env(f.rank), size = env(f.size);
    if (!rank && !size) continue;
    if (chosen) {
      // Note [Two launchers' variables]: an outer launcher's are ignored, as PyTorch does;
      // RANK and WORLD_SIZE set by hand must agree with a launcher's.
      if (chosen->launcher != std::string("torchrun") || started_by_torchrun || !rank || !size) continue;
      EMBER_CHECK(parse_int(f.rank, *rank, 0, 1 << 20) == info.rank && parse_int(f.size, *size, 1, 1 << 20) ==
                      info.world_size,
                  "rendezvous: RANK=", info.rank, " and WORLD_SIZE=", info.world_size, " contradict ", f.rank, "=",
                  *rank, " and ", f.size, "=", *size, " (", f.launcher, "'s); no torchrun or ember-run set them "
                  "(TORCHELASTIC_RESTART_COUNT / EMBER_RESTART_COUNT are missing): unset RANK and WORLD_SIZE to "
                  "use ", f.launcher, "'s, or make them agree");
      continue;
    }
    EMBER_CHECK(rank.has_value(), "rendezvous: ", f.size, " is set but ", f.rank, " is not (", f.launcher,
                "'s variables come together)");
    EMBER_CHECK(size.has_value(), "rendezvous: ", f.rank, " is set but ", f.size, " is not (", f.launcher,
                "'s variables come together)");
    chosen = &f;
    info.launcher = f.launcher;
    info.world_size = parse_int(f.size, *size, 1, 1 << 20);
    info.rank = parse_int(f.rank, *rank, 0, 1 << 20);
    EMBER_CHECK(info.rank < info.world_size, "rendezvous: ", f.rank, "=", info.rank, " must be below ", f.size, "=",
                info.world_size);
    read_local(info, f, env);
  }

  if (auto addr = env("MASTER_ADDR")) {
    EMBER_CHECK(!addr->empty(), "rendezvous: MASTER_ADDR is empty");
    info.master_addr = *addr;
  } else if (auto nodes = env("SLURM_JOB_NODELIST"); nodes && info.launcher == std::string("slurm")) {
    info.master_addr = first_slurm_host(*nodes);
  } else {
    EMBER_CHECK(info.local_world_size == info.world_size, "rendezvous: MASTER_ADDR is not set; the ",
                info.world_size, " ranks span several nodes (", info.local_world_size,
                " on this one), so rank 0's address must be given");
  }
  if (auto port = env("MASTER_PORT")) info.master_port = parse_int("MASTER_PORT", *port, 1, 65535);

  for (const char* name : {"EMBER_RUN_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"})
    if (auto id = env(name)) {
      info.job_id = *id;
      break;
    }
  for (const char* name : {"EMBER_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"})
    if (auto r = env(name)) {
      info.restart = parse_int(name, *r, 0, 1 << 20);
      break;
    }
  for (const char* name : {"EMBER_MAX_RESTARTS", "TORCHELASTIC_MAX_RESTARTS"})
    if (auto r = env(name)) {
      info.max_restarts = parse_int(name, *r, 0, 1 << 20);
      break;
    }
  if (auto t = env("EMBER_COMM_TIMEOUT_S"))
    info.timeout = std::chrono::seconds(parse_int("EMBER_COMM_TIMEOUT_S", *t, 1, 1 << 24));
  if (info.world_size > 1) info.secret = job_secret(info, env);
  return info;
}

std::shared_ptr<Store> connect_store(const LaunchInfo& info) {
  EMBER_CHECK(!info.secret.value.empty(), "rendezvous: no job secret for the store of job '", info.job_id,
              "' (launch_info_from_env finds one)");
  TcpStoreOptions options{.secret = info.secret.value, .timeout = info.timeout};
  // On one node nothing off this machine needs the store: it listens on the loopback
  // interface only, where every rank reaches it whatever MASTER_ADDR names.
  options.loopback_only = info.local_world_size == info.world_size;
  if (info.rank == 0) return TcpStore::serve(info.master_port, options);
  return TcpStore::connect(options.loopback_only ? "127.0.0.1" : info.master_addr, info.master_port, options);
}

std::shared_ptr<ProcessGroup> init_process_group(const LaunchInfo& info) {
  std::shared_ptr<Store> base;
  if (info.world_size == 1) {
    base = std::make_shared<InProcessStore>();
  } else {
    base = connect_store(info);
  }
  base->set_timeout(info.timeout);
  auto store = std::make_shared<PrefixStore>(info.job_id + "/" + std::to_string(info.restart), base);
  if (info.world_size > 1) claim_rank(*store, info);
  ProcessGroupOptions options;
  options.timeout = info.timeout;
  return std::make_shared<ProcessGroup>(store, info.rank, info.world_size, options);
}

Device local_device(const LaunchInfo& info) {
  return cuda_device_count() >= info.local_world_size ? Device::cuda(info.local_rank) : Device::cpu();
}

}  // namespace ember::comm
