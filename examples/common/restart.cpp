#include "examples/common/restart.h"

#include <signal.h>

#include <cstdio>
#include <filesystem>

#include "base/error.h"
#include "ember.h"

namespace ember::examples {
namespace {

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ea, eb;
  const auto ca = std::filesystem::weakly_canonical(a, ea), cb = std::filesystem::weakly_canonical(b, eb);
  return !ea && !eb && ca == cb;
}

}  // namespace

bool resume_checkpoint_exists(const std::string& resume, const std::string& save, const comm::LaunchInfo& launch,
                              comm::ProcessGroup* pg) {
  if (resume.empty()) return false;
  std::error_code ec;
  const int64_t world = pg ? pg->size() : 1;
  // The non-throwing overload: a folder without search permission or a symlink loop is an
  // error of its own, not "does not exist" (nor a filesystem_error that ends the program).
  const auto status = std::filesystem::status(resume, ec);
  EMBER_CHECK(!ec || ec == std::errc::no_such_file_or_directory, "--resume: cannot look at '", resume, "': ",
              ec.message());
  EMBER_CHECK(!std::filesystem::exists(status) || std::filesystem::is_regular_file(status), "--resume: '", resume,
              "' is ", std::filesystem::is_directory(status) ? "a directory" : "not a regular file",
              ", not a checkpoint file");
  int64_t seen = std::filesystem::exists(status) ? 1 : 0;  // by how many processes
  if (pg) {
    Tensor t = tensor({static_cast<double>(seen)}, {kInt64, Device::cpu()});
    pg->all_reduce(t)->wait();
    seen = t.item<int64_t>();
  }
  EMBER_CHECK(seen == 0 || seen == world, "--resume: '", resume, "' exists for ", seen, " of the ", world,
              " processes; each reads it, so on several nodes it must be in a folder they share");
  if (seen) return true;
  EMBER_CHECK(launch.max_restarts > 0 && !save.empty() && same_file(resume, save), "--resume: '", resume,
              "' does not exist (a missing checkpoint means 'not written yet' only in a job that ember-run or "
              "torchrun may restart, --max-restarts above 0, and that writes it itself: --save naming the same "
              "file)");
  if (launch.rank == 0) {
    if (launch.restart == 0)
      std::printf("--resume: %s is not written yet: training from the start (a restart resumes from it)\n",
                  resume.c_str());
    else
      std::printf("restart %d: %s was not written before the failure: training from the start\n", launch.restart,
                  resume.c_str());
  }
  return false;
}

void crash_after_checkpoint_for_tests(const comm::LaunchInfo& launch, comm::ProcessGroup* pg) {
  const auto rank = comm::process_env("EMBER_TEST_CRASH_AFTER_CHECKPOINT");
  if (!rank || launch.restart > 0) return;
  if (pg) pg->barrier()->wait();  // rank 0 has written the checkpoint
  if (*rank != std::to_string(launch.rank)) return;
  std::fflush(stdout);
  ::raise(SIGKILL);
}

}  // namespace ember::examples
