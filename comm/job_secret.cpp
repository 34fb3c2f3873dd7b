// The job's secret from the environment (comm/job_secret.h).
#include "comm/job_secret.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/error.h"

namespace ember::comm {

std::optional<std::string> process_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

void random_bytes(void* out, std::size_t n) {
  char* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t got = ::getrandom(p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && errno == ENOSYS) break;  // a kernel before 3.17: read /dev/urandom
    EMBER_CHECK(got > 0, "random_bytes: getrandom failed: ", std::strerror(errno));
    p += got;
    n -= static_cast<std::size_t>(got);
  }
  if (n == 0) return;
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  EMBER_CHECK(fd >= 0, "random_bytes: cannot open /dev/urandom: ", std::strerror(errno));
  while (n > 0) {
    const ssize_t got = ::read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      ::close(fd);
      EMBER_FAIL("random_bytes: cannot read /dev/urandom: ", std::strerror(errno));
    }
    p += got;
    n -= static_cast<std::size_t>(got);
  }
  ::close(fd);
}

std::string random_secret() {
  unsigned char bytes[32];
  random_bytes(bytes, sizeof bytes);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) out += hex[b >> 4], out += hex[b & 15];
  return out;
}

namespace {

const char* kHowToMake = "e.g. `head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'`";

void check_length(const std::string& secret, const std::string& what) {
  EMBER_CHECK(secret.size() >= kMinSecretLength, "rendezvous: ", what, " holds ", secret.size(),
              " characters; a job secret needs at least ", kMinSecretLength, " (", kHowToMake, ")");
}

// The secret in `path`, which must be this user's regular file that no one else may read or write.
std::string read_secret_file(const std::string& path) {
  const std::string what = "EMBER_JOB_SECRET_FILE='" + path + "'";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  EMBER_CHECK(fd >= 0, "rendezvous: cannot open ", what, ": ", std::strerror(errno));
  struct stat st{};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  std::string problem;
  if (!stat_ok) {
    problem = std::string("cannot stat it: ") + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    problem = "it is not a regular file";
  } else if (st.st_uid != ::geteuid()) {
    problem = "it belongs to user id " + std::to_string(st.st_uid) + ", not to this user (" +
              std::to_string(::geteuid()) + ")";
  } else if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    problem = std::string("its mode ") + mode + " lets other users read or change it: chmod 600 '" + path + "'";
  } else if (st.st_size > 4096) {
    problem = "it holds " + std::to_string(st.st_size) + " bytes; a secret file holds at most 4096";
  }
  std::string secret;
  if (problem.empty()) {
    char buf[4097];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0 && secret.size() <= 4096) secret.append(buf, static_cast<size_t>(n));
    if (n < 0) problem = std::string("cannot read it: ") + std::strerror(errno);
  }
  ::close(fd);
  EMBER_CHECK(problem.empty(), "rendezvous: ", what, " cannot hold the job's secret: ", problem);
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  check_length(secret, what);
  return secret;
}

std::optional<JobSecret> slurm_secret(const EnvLookup& env) {
  const auto job = env("SLURM_JOB_ID");
  if (!job || job->empty()) return std::nullopt;
  const auto step = env("SLURM_STEP_ID");
  return JobSecret{"ember-derived/slurm/" + *job + "/" + step.value_or("-"),
                   "derived from SLURM_JOB_ID" + std::string(step ? " and SLURM_STEP_ID" : ""), true};
}

std::optional<JobSecret> openmpi_secret(const EnvLookup& env) {
  for (const char* name : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid"})
    if (auto id = env(name); id && !id->empty())
      return JobSecret{"ember-derived/openmpi/" + std::string(name) + "/" + *id, std::string("derived from ") + name,
                       true};
  return std::nullopt;
}

}  // namespace

std::optional<JobSecret> user_job_secret(const EnvLookup& env) {
  if (auto s = env("EMBER_JOB_SECRET")) {
    check_length(*s, "EMBER_JOB_SECRET");
    return JobSecret{*s, "EMBER_JOB_SECRET", false};
  }
  if (auto path = env("EMBER_JOB_SECRET_FILE")) {
    EMBER_CHECK(!path->empty(), "rendezvous: EMBER_JOB_SECRET_FILE is set but empty");
    return JobSecret{read_secret_file(*path), "EMBER_JOB_SECRET_FILE", false};
  }
  return std::nullopt;
}

std::optional<JobSecret> scheduler_job_secret(const EnvLookup& env, bool openmpi_first) {
  auto first = openmpi_first ? openmpi_secret(env) : slurm_secret(env);
  if (first) return first;
  return openmpi_first ? slurm_secret(env) : openmpi_secret(env);
}

}  // namespace ember::comm
