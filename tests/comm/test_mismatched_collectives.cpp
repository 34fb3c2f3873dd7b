// Ranks that issue different collectives (a user's bug): another collective, size, dtype,
// reduce op or root on one rank.
//
// On CPU tensors every rank fails with an ember::Error within the group's timeout. Before
// Note [Tags name the call] (comm/gloo_backend.cpp) some of these cases aborted the
// process (Gloo's device thread threw: a larger message than the receiver posted) and
// others returned a wrong answer; each case runs in a child process (a death test), so a
// regression that aborts fails one test, not the binary.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "base/error.h"
#include "comm/process_group.h"
#include "core/ops.h"
#include "tests/comm/comm_test_util.h"

namespace ember::comm {
namespace {

using namespace std::chrono_literals;
using testing::run_ranks;

// One side of a mismatch: issues a collective on `d` and says what it issued ("%d": the
// device type's name).
struct Side {
  std::function<std::shared_ptr<Work>(ProcessGroup&, Device)> issue;
  std::string call;
};

// Rank 1 issues `odd`, every other rank `even`.
struct Mismatch {
  const char* name;
  Side even, odd;
};

Side all_reduce(int64_t n, DType t = kFloat32, ReduceOp op = ReduceOp::kSum) {
  return {[=](ProcessGroup& pg, Device d) { return pg.all_reduce(ones({n}, {t, d}), op); },
          detail::str("all_reduce (", reduce_op_name(op), ") of ", n, " ", dtype_name(t), " elements on %d tensors")};
}
Side broadcast(int64_t n, int root = 0) {
  return {[=](ProcessGroup& pg, Device d) { return pg.broadcast(ones({n}, {kFloat32, d}), root); },
          detail::str("broadcast of ", n, " float32 elements from rank ", root, " on %d tensors")};
}
Side all_gather(int64_t n) {
  return {[=](ProcessGroup& pg, Device d) {
            return pg.all_gather(zeros({n * pg.size()}, {kFloat32, d}), ones({n}, {kFloat32, d}));
          },
          detail::str("all_gather of ", n, " float32 elements on %d tensors")};
}
// in: n elements (a multiple of the world size, 2 and 3 here).
Side reduce_scatter(int64_t n) {
  return {[=](ProcessGroup& pg, Device d) {
            return pg.reduce_scatter(zeros({n / pg.size()}, {kFloat32, d}), ones({n}, {kFloat32, d}));
          },
          detail::str("reduce_scatter (sum) of ", n, " float32 elements on %d tensors")};
}
Side barrier() {
  return {[](ProcessGroup& pg, Device) { return pg.barrier(); }, "barrier"};
}

// What Gloo did with each at 2 ranks before its tags named the call.
const std::vector<Mismatch> kMismatches = {
    {"AllReduceVsBroadcast", all_reduce(1000), broadcast(1000)},           // timed out
    {"AllReduceVsAllGather", all_reduce(1000), all_gather(1000)},          // timed out
    {"AllReduceVsReduceScatter", all_reduce(1200), reduce_scatter(1200)},  // wrong answer
    {"AllReduceVsBarrier", all_reduce(1000), barrier()},                   // timed out
    {"AllReduceSize", all_reduce(1000), all_reduce(2000)},                 // abort
    {"AllReduceSizeLarge", all_reduce(1 << 20), all_reduce(2 << 20)},      // wrong answer on one rank
    {"AllGatherSize", all_gather(10), all_gather(20)},                     // abort
    {"BroadcastRootSendsMore", broadcast(2000), broadcast(1000)},          // abort
    {"BroadcastRootSendsLess", broadcast(1000), broadcast(2000)},          // wrong answer
    {"DTypeWidth", all_reduce(1000, kFloat32), all_reduce(1000, kFloat64)},  // abort
    {"DTypeSameWidth", all_reduce(1000, kFloat32), all_reduce(1000, kInt32)},  // wrong answer
    {"ReduceOp", all_reduce(1000, kFloat32, ReduceOp::kSum), all_reduce(1000, kFloat32, ReduceOp::kMax)},  // wrong
    {"BroadcastRoot", broadcast(1000, 0), broadcast(1000, 1)},  // timed out
};

void PrintTo(const Mismatch& m, std::ostream* os) { *os << m.name; }

std::string mismatch_name(const ::testing::TestParamInfo<Mismatch>& info) { return info.param.name; }

// ----- an error on every rank, CPU tensors -----

class MismatchUnchecked : public ::testing::TestWithParam<Mismatch> {};

// Run in a child process: 2 ranks issue the mismatch; exits 0 when every rank's wait()
// raised an ember::Error naming the rank's own collective, else 1 with what happened on
// stderr (gtest prints it).
[[noreturn]] void issue_unchecked(const Mismatch& m) {
  std::mutex mu;
  std::string bad;
  const auto t0 = std::chrono::steady_clock::now();
  run_ranks(2, [&](ProcessGroup& pg) {
    const Side& side = pg.rank() == 1 ? m.odd : m.even;
    const std::string op = side.call.substr(0, side.call.find(' '));
    std::string outcome = "returned";
    try {
      side.issue(pg, Device::cpu())->wait();
    } catch (const Error& e) {
      outcome = e.what();
      if (outcome.rfind(op, 0) == 0 && outcome.find("on rank " + std::to_string(pg.rank())) != std::string::npos)
        return;
    }
    std::lock_guard lock(mu);
    bad += detail::str("rank ", pg.rank(), " (", op, "): ", outcome, "\n");
  }, ProcessGroupOptions{.timeout = 500ms});
  // A hard bound that a hang would blow: the timeout is 0.5 s.
  if (std::chrono::steady_clock::now() - t0 > 20s) bad += "took more than 20 s\n";
  std::fputs(bad.c_str(), stderr);
  std::exit(bad.empty() ? 0 : 1);
}

TEST_P(MismatchUnchecked, EveryRankFailsWithAnError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(issue_unchecked(GetParam()), ::testing::ExitedWithCode(0), "");
}

INSTANTIATE_TEST_SUITE_P(Gloo, MismatchUnchecked, ::testing::ValuesIn(kMismatches), mismatch_name);

}  // namespace
}  // namespace ember::comm
