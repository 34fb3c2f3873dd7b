// Rendezvous from the environment (comm/rendezvous.h).
#include "comm/rendezvous.h"

#include <cstdlib>

#include "base/error.h"
#include "comm/tcp_store.h"

namespace ember::comm {

std::optional<std::string> process_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

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
  for (const Family& f : families) {
    const auto rank = env(f.rank), size = env(f.size);
    if (!rank && !size) continue;
    EMBER_CHECK(rank.has_value(), "rendezvous: ", f.size, " is set but ", f.rank, " is not (", f.launcher,
                "'s variables come together)");
    EMBER_CHECK(size.has_value(), "rendezvous: ", f.rank, " is set but ", f.size, " is not (", f.launcher,
                "'s variables come together)");
    info.launcher = f.launcher;
    info.world_size = parse_int(f.size, *size, 1, 1 << 20);
    info.rank = parse_int(f.rank, *rank, 0, 1 << 20);
    EMBER_CHECK(info.rank < info.world_size, "rendezvous: ", f.rank, "=", info.rank, " must be below ", f.size, "=",
                info.world_size);
    info.local_rank = info.rank;
    info.local_world_size = info.world_size;
    if (auto lr = env(f.local_rank)) info.local_rank = parse_int(f.local_rank, *lr, 0, info.world_size - 1);
    if (auto ls = env(f.local_size)) {
      std::string v = *ls;
      // Slurm writes "2(x3)" (two tasks on each of three nodes) or "2,1": the first count is this layout's.
      if (info.launcher == std::string("slurm")) v = v.substr(0, v.find_first_of("(,"));
      info.local_world_size = parse_int(f.local_size, v, 1, info.world_size);
    }
    EMBER_CHECK(info.local_rank < info.local_world_size, "rendezvous: ", f.local_rank, "=", info.local_rank,
                " must be below ", f.local_size, "=", info.local_world_size);
    break;
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
  if (auto t = env("EMBER_COMM_TIMEOUT_S"))
    info.timeout = std::chrono::seconds(parse_int("EMBER_COMM_TIMEOUT_S", *t, 1, 1 << 24));
  return info;
}

std::shared_ptr<ProcessGroup> init_process_group(const LaunchInfo& info) {
  std::shared_ptr<Store> base;
  if (info.world_size == 1) {
    base = std::make_shared<InProcessStore>();
  } else if (info.rank == 0) {
    base = TcpStore::serve(info.master_port, info.timeout);
  } else {
    base = TcpStore::connect(info.master_addr, info.master_port, info.timeout);
  }
  base->set_timeout(info.timeout);
  auto store = std::make_shared<PrefixStore>(info.job_id + "/" + std::to_string(info.restart), base);
  ProcessGroupOptions options;
  options.timeout = info.timeout;
  return std::make_shared<ProcessGroup>(store, info.rank, info.world_size, options);
}

Device local_device(const LaunchInfo& info) {
  return cuda_device_count() >= info.local_world_size ? Device::cuda(info.local_rank) : Device::cpu();
}

}  // namespace ember::comm
