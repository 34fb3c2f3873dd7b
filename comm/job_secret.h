// The job's secret: what every connection to its store proves (comm/store_auth.h), so
// that only the job's own ranks join it. Where it comes from, first found wins:
//
//   EMBER_JOB_SECRET         given by the user (at least 16 characters); ember-run sets
//                            it for its ranks
//   EMBER_JOB_SECRET_FILE    a file holding it, readable by its owner only (mode 0600 or
//                            0400); one readable or writable by others is an error
//   the scheduler's ids      derived from SLURM_JOB_ID and SLURM_STEP_ID, or OpenMPI's
//                            PMIX_NAMESPACE / OMPI_MCA_ess_base_jobid / OMPI_MCA_orte_ess_jobid
//                            (the same in every process of one srun or mpirun)
//   ember-run, one node      a fresh random secret for each job and each restart
//   one node, no launcher    derived from this user's id and the job id
//
// A secret derived from ids (the last three but one) stops accidents: a job given
// another's port. It does not stop a hostile user on the cluster, who can read the ids;
// a random or user-given secret stops both (docs/reliability.md, "Rendezvous"). A job on
// several nodes with none of the first three is an error saying what to set.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>

namespace ember::comm {

// Looks a variable up; the default reads the process environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
std::optional<std::string> process_env(const std::string& name);

struct JobSecret {
  std::string value;   // the HMAC key; never printed
  std::string source;  // where it came from, for messages: "EMBER_JOB_SECRET", "derived from SLURM_JOB_ID ..."
  bool derived = false;  // from ids others can read: stops accidents, not a hostile user
};

inline constexpr std::size_t kMinSecretLength = 16;

// n bytes from the kernel's random source (getrandom, else /dev/urandom).
void random_bytes(void* out, std::size_t n);
// 32 random bytes as 64 hex digits.
std::string random_secret();

// EMBER_JOB_SECRET, else EMBER_JOB_SECRET_FILE (checked: a regular file of this user's,
// readable by no one else, holding at least 16 characters; a final newline is dropped).
std::optional<JobSecret> user_job_secret(const EnvLookup& env);
// Derived from Slurm's job and step ids or OpenMPI's job id; OpenMPI's first when
// `openmpi_first` (mpirun inside a Slurm allocation: Note [Two launchers' variables]).
std::optional<JobSecret> scheduler_job_secret(const EnvLookup& env, bool openmpi_first = false);

}  // namespace ember::comm
