// Rendezvous from the environment: which rank this process is, how many there are and
// where rank 0's store listens, from the variables a launcher sets.
//
// Read in this order; the first family present is the launcher that started this process:
//   torchrun / ember-run  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
//   OpenMPI (mpirun)      OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   Slurm (srun)          SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_TASKS_PER_NODE
//                         (with SLURM_NODEID when the nodes hold different task counts)
//   none                  one process: rank 0 of 1
//
// Note [Two launchers' variables]. A launcher started inside another's allocation
// (torchrun or ember-run in an srun step, mpirun in a Slurm job) leaves the outer one's
// variables in place; they describe the outer step and differ for good reason. As in
// PyTorch, the inner launcher's are the truth: its env:// rendezvous reads only RANK and
// WORLD_SIZE, and its MPI backend takes rank and size from the MPI runtime, never from
// Slurm's. RANK and WORLD_SIZE that no launcher set (no TORCHELASTIC_RESTART_COUNT or
// EMBER_RESTART_COUNT beside them: exported by hand, or left over in a shell) must agree
// with an OpenMPI or Slurm rank and size present too; otherwise every process could be
// "rank 0 of 1" of its own job, and the disagreement is an error naming both variables.
//
// A missing local rank or size is taken from the global one only where the job is known
// to run on one node (MASTER_ADDR unset or loopback; under Slurm, SLURM_NNODES=1);
// elsewhere it is an error naming the variable (Note [Local rank and size]).
// MASTER_ADDR (default under Slurm: the first host of SLURM_JOB_NODELIST; on one node:
// 127.0.0.1) and MASTER_PORT (default 29500) locate rank 0's TcpStore. Keys are prefixed
// by the job (EMBER_RUN_ID, TORCHELASTIC_RUN_ID or SLURM_JOB_ID) and the restart
// (EMBER_RESTART_COUNT or TORCHELASTIC_RESTART_COUNT), so a restarted group never reads
// a previous attempt's keys; EMBER_MAX_RESTARTS or TORCHELASTIC_MAX_RESTARTS say how often
// the launcher may restart it. EMBER_COMM_TIMEOUT_S sets the timeout. A missing, malformed
// or contradictory variable is an ember::Error naming it. The job's secret, which every
// connection to the store proves, comes from EMBER_JOB_SECRET (ember-run sets it) or as
// comm/job_secret.h says; a job on several nodes without one is an error naming them.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "comm/job_secret.h"
#include "comm/process_group.h"

namespace ember::comm {

struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string launcher = "none";  // "torchrun", "openmpi", "slurm" or "none"
  std::string job_id = "ember";
  int restart = 0;
  int max_restarts = 0;  // how often the launcher may restart the group (0: a failure ends the job)
  Duration timeout = kDefaultTimeout;
  JobSecret secret;  // what each store connection proves (comm/job_secret.h); none for one process
};

LaunchInfo launch_info_from_env(const EnvLookup& env = process_env);

// The first host of a Slurm node list: "gpu[03-05,9],cpu1" -> "gpu03".
std::string first_slurm_host(const std::string& nodelist);

// Joins the job `info` describes: rank 0 serves a TcpStore on master_port, the others
// connect to master_addr:master_port; keys under job_id/restart. World size 1 needs no
// network (an in-process store).
std::shared_ptr<ProcessGroup> init_process_group(const LaunchInfo& info);
// The store init_process_group meets on, before any key is written (world size > 1):
// rank 0 serves on master_port, on the loopback interface only when the job runs on one
// node (the others then reach it on 127.0.0.1), and every connection proves info.secret.
std::shared_ptr<Store> connect_store(const LaunchInfo& info);
inline std::shared_ptr<ProcessGroup> init_process_group_from_env() {
  return init_process_group(launch_info_from_env());
}

// The device a process of a data-parallel job trains on when none is named, as torchrun's
// convention has it: cuda:local_rank when this node has a CUDA device for each of its
// processes (local_world_size <= the devices this process sees); else the CPU, for every
// process of the node alike.
Device local_device(const LaunchInfo& info);

}  // namespace ember::comm
