// Ranks that issue different collectives (a user's bug): another collective, size, dtype,
// reduce op or root on one rank.
//
// Without the check (the default), on CPU tensors: every rank fails with an ember::Error
// within the group's timeout. Before Note [Tags name the call] (comm/gloo_backend.cpp)
// some of these cases aborted the process (Gloo's device thread threw: a larger message
// than the receiver posted) and others returned a wrong answer; each case runs in a
// child process (a death test), so a regression that aborts fails one test, not the binary.
//
// With the check (EMBER_DISTRIBUTED_DEBUG=detail, Note [Checking that ranks agree] in
// comm/process_group.cpp), on CPU tensors and on CUDA tensors (NCCL): every rank raises the
// same error naming each rank's call, and the group still works afterwards.
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

// One side of a mismatch: issues a collective on `d` and says what it issued, as the
// check's error names it ("%d": the device type's name).
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

// What Gloo did with each at 2 ranks before its tags named the call (docs/distributed.md,
// "When ranks disagree").
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

std::string on_device(std::string call, const std::string& device) {
  const size_t at = call.find("%d");
  if (at != std::string::npos) call.replace(at, 2, device);
  return call;
}

// ----- without the check: an error on every rank, CPU tensors -----

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
  }, ProcessGroupOptions{.timeout = 500ms, .check_collectives = false});
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

// ----- with the check: the same error on every rank, naming each rank's call -----

class MismatchChecked : public ::testing::TestWithParam<std::tuple<Mismatch, DeviceType>> {
 protected:
  void SetUp() override {
#if EMBER_COMM_NCCL
    if (type() == DeviceType::CUDA && cuda_device_count() < 3) GTEST_SKIP() << "needs 3 CUDA devices";
#else
    if (type() == DeviceType::CUDA) GTEST_SKIP() << "needs NCCL";
#endif
  }
  const Mismatch& mismatch() const { return std::get<0>(GetParam()); }
  DeviceType type() const { return std::get<1>(GetParam()); }
};

// 3 ranks: ranks 0 and 2 agree, rank 1 does not. Afterwards an all-reduce on every rank
// must give the sum of the ranks' ones (3, exact): the group still works.
TEST_P(MismatchChecked, EveryRankNamesEachCall) {
  const Mismatch& m = mismatch();
  const std::string dev(device_type_name(type()));
  const std::string expected = detail::str("the ranks issued different collectives as collective 1 of the group ",
                                           "(EMBER_DISTRIBUTED_DEBUG=detail), so none was run: ranks 0, 2: ",
                                           on_device(m.even.call, dev), "; rank 1: ", on_device(m.odd.call, dev));
  const auto t0 = std::chrono::steady_clock::now();
  run_ranks(3, [&](ProcessGroup& pg) {
    const Device d = type() == DeviceType::CPU ? Device::cpu() : Device::cuda(pg.rank());
    const Side& side = pg.rank() == 1 ? m.odd : m.even;
    try {
      side.issue(pg, d)->wait();
      ADD_FAILURE() << "rank " << pg.rank() << ": the mismatched collective ran";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(expected), std::string::npos) << "rank " << pg.rank() << ": " << message;
      const std::string op = side.call.substr(0, side.call.find(' '));
      EXPECT_EQ(message.rfind(op, 0), 0u) << "rank " << pg.rank() << " does not name its own call first: " << message;
      EXPECT_NE(message.find("on rank " + std::to_string(pg.rank()) + " "), std::string::npos) << message;
    }
    Tensor x = ones({5}, {kFloat32, d});
    pg.all_reduce(x)->wait();
    EXPECT_EQ(x.to(Device::cpu()).to_vector<float>(), std::vector<float>(5, 3.0f)) << "rank " << pg.rank();
  }, ProcessGroupOptions{.timeout = 10s, .check_collectives = true});
  // Nothing waits for a timeout here; 10 s is a hard bound that a hang would blow.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
}

std::string checked_name(const ::testing::TestParamInfo<std::tuple<Mismatch, DeviceType>>& info) {
  return std::string(device_type_name(std::get<1>(info.param))) + "_" + std::get<0>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(Backends, MismatchChecked,
                         ::testing::Combine(::testing::ValuesIn(kMismatches),
                                            ::testing::Values(DeviceType::CPU, DeviceType::CUDA)),
                         checked_name);

// One rank on CPU tensors (Gloo), the others on CUDA tensors (NCCL): unchecked, each
// backend would wait for peers that never come.
TEST(MismatchChecked, DeviceTypes) {
#if EMBER_COMM_NCCL
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 CUDA devices";
#else
  GTEST_SKIP() << "needs NCCL";
#endif
  run_ranks(2, [](ProcessGroup& pg) {
    const Device d = pg.rank() == 0 ? Device::cpu() : Device::cuda(pg.rank());
    try {
      pg.all_reduce(ones({8}, {kFloat32, d}))->wait();
      ADD_FAILURE() << "rank " << pg.rank() << ": the mismatched collective ran";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rank 0: all_reduce (sum) of 8 float32 elements on cpu tensors; rank 1: "
                                           "all_reduce (sum) of 8 float32 elements on cuda tensors"),
                std::string::npos)
          << e.what();
    }
  }, ProcessGroupOptions{.timeout = 10s, .check_collectives = true});
}

// Agreeing ranks are untouched by the check: a sequence of every collective gives the
// right values.
TEST(MismatchChecked, AgreeingRanksRunAsUsual) {
  run_ranks(3, [](ProcessGroup& pg) {
    const float r = static_cast<float>(pg.rank());
    Tensor a = full({4}, r, kFloat32), b = full({4}, r, kFloat32), g = zeros({6}), s = zeros({2});
    pg.all_reduce(a, ReduceOp::kMax)->wait();
    pg.broadcast(b, 2)->wait();
    pg.all_gather(g, full({2}, r, kFloat32))->wait();
    pg.reduce_scatter(s, ones({6}))->wait();
    pg.barrier()->wait();
    EXPECT_EQ(a.to_vector<float>(), std::vector<float>(4, 2.0f));
    EXPECT_EQ(b.to_vector<float>(), std::vector<float>(4, 2.0f));
    EXPECT_EQ(g.to_vector<float>(), (std::vector<float>{0, 0, 1, 1, 2, 2}));
    EXPECT_EQ(s.to_vector<float>(), std::vector<float>(2, 3.0f));
  }, ProcessGroupOptions{.timeout = 10s, .check_collectives = true});
}

// A rank that never issues the collective: the check's exchange times out with an error
// naming the collective, as the collective itself would.
TEST(MismatchChecked, RankThatNeverCallsTimesOut) {
  std::string message;
  run_ranks(2, [&](ProcessGroup& pg) {
    if (pg.rank() == 1) return;  // leaves at once: its peer's exchange fails
    try {
      pg.all_reduce(ones({3}));
      ADD_FAILURE() << "the check passed";
    } catch (const Error& e) {
      message = e.what();
    }
  }, ProcessGroupOptions{.timeout = 500ms, .check_collectives = true});
  EXPECT_EQ(message.rfind("all_reduce (sum) of 3 float32 elements on rank 0 (ranks 0-1 of 2): the "
                          "EMBER_DISTRIBUTED_DEBUG check of collective 1 failed: ",
                          0),
            0u)
      << message;
}

TEST(MismatchChecked, EnvironmentVariable) {
  const char* before = std::getenv("EMBER_DISTRIBUTED_DEBUG");
  const std::string saved = before ? before : "";
  ::setenv("EMBER_DISTRIBUTED_DEBUG", "DETAIL", 1);
  EXPECT_TRUE(ProcessGroupOptions{}.check_collectives);
  ::setenv("EMBER_DISTRIBUTED_DEBUG", "off", 1);
  EXPECT_FALSE(ProcessGroupOptions{}.check_collectives);
  ::setenv("EMBER_DISTRIBUTED_DEBUG", "info", 1);
  EXPECT_THROW((void)ProcessGroupOptions{}, Error);
  ::unsetenv("EMBER_DISTRIBUTED_DEBUG");
  EXPECT_FALSE(ProcessGroupOptions{}.check_collectives);
  if (before) ::setenv("EMBER_DISTRIBUTED_DEBUG", saved.c_str(), 1);
}

}  // namespace
}  // namespace ember::comm
