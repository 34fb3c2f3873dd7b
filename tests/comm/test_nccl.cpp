// The NCCL backend beyond the collectives themselves (tests/comm/test_process_group.cpp
// runs those on CUDA tensors too): the bootstrap, which needs no device, so it runs on
// every build with NCCL; the watchdog; collectives ordered after the compute stream; and
// DistributedDataParallel on CUDA tensors. Ranks are threads, rank r on cuda:r; the tests
// that need devices skip without two (ctest gives the emulated build EMBER_EMU_DEVICES=4).
#include <gtest/gtest.h>

#if EMBER_COMM_NCCL

#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "base/error.h"
#include "comm/ddp.h"
#include "comm/nccl_backend.h"
#include "core/stream.h"
#include "tests/comm/comm_test_util.h"
#include "tests/comm/ddp_test_util.h"

namespace ember::comm {
namespace {

using namespace std::chrono_literals;
using namespace testing;

bool two_devices() { return cuda_device_count() >= 2; }

TEST(NcclBootstrap, EveryRankGetsRankZerosUniqueId) {
  auto store = std::make_shared<InProcessStore>();
  std::vector<std::string> ids(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r)
    threads.emplace_back([&, r] { ids[r] = exchange_nccl_unique_id(*store, "comm0", r, 4, 10s); });
  for (auto& t : threads) t.join();
  ASSERT_EQ(ids[0].size(), 128u);
  EXPECT_NE(ids[0], std::string(128, '\0'));
  for (int r = 1; r < 4; ++r) EXPECT_EQ(ids[r], ids[0]) << "rank " << r;
  // The next communicator gets another id.
  std::string next;
  std::thread other([&] { exchange_nccl_unique_id(*store, "comm1", 1, 2, 10s); });
  next = exchange_nccl_unique_id(*store, "comm1", 0, 2, 10s);
  other.join();
  EXPECT_NE(next, ids[0]);
}

TEST(NcclBootstrap, AMissingRankIsNamed) {
  auto store = std::make_shared<InProcessStore>();
  std::thread one([&] { EXPECT_THROW(exchange_nccl_unique_id(*store, "c", 1, 3, 300ms), Error); });
  try {
    exchange_nccl_unique_id(*store, "c", 0, 3, 300ms);
    ADD_FAILURE() << "the bootstrap did not time out";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2 of 3 did not reach it"), std::string::npos) << e.what();
  }
  one.join();
}

// The collective reads what the compute stream wrote just before, and the compute stream's
// next op reads what the collective wrote, with no host synchronisation between.
TEST(Nccl, OrderedWithTheComputeStream) {
  if (!two_devices()) GTEST_SKIP() << "needs 2 CUDA devices";
  run_ranks(2, [](ProcessGroup& pg) {
    const Device d = Device::cuda(pg.rank());
    Tensor x = full({4096}, 1.0, d);
    for (int k = 0; k < 5; ++k) {
      x = x * 2.0 + static_cast<double>(pg.rank());  // queued on the compute stream
      pg.all_reduce(x)->wait();                       // the compute stream waits for it
      x = x - 1.0;
    }
    // Each step: (2x + 0) + (2x + 1) - 1 = 4x, so x = 4^5 everywhere.
    EXPECT_EQ(x.to_vector<float>()[4095], 1024.0f);
  });
}

// Rank 1 never issues the second all-reduce: rank 0's wait returns (it orders its stream),
// the watchdog aborts the communicator after the timeout and fails the Work with the
// collective's name; every later collective fails at once.
TEST(Nccl, WatchdogAbortsACollectiveAPeerNeverIssues) {
  if (!two_devices()) GTEST_SKIP() << "needs 2 CUDA devices";
  std::string message, later;
  std::chrono::steady_clock::duration took{};
  run_ranks(
      2,
      [&](ProcessGroup& pg) {
        const Device d = Device::cuda(pg.rank());
        Tensor t = ones({1000}, d);
        pg.all_reduce(t)->wait();  // both ranks: the communicator exists
        synchronize(d);
        if (pg.rank() == 1) {
          std::this_thread::sleep_for(1500ms);
          return;
        }
        const auto t0 = std::chrono::steady_clock::now();
        auto w = pg.all_reduce(t);
        w->wait();  // orders the stream; does not block the host
        while (!w->completed() && std::chrono::steady_clock::now() - t0 < 20s) std::this_thread::sleep_for(5ms);
        took = std::chrono::steady_clock::now() - t0;
        try {
          w->wait();
          ADD_FAILURE() << "the abandoned all_reduce succeeded";
        } catch (const Error& e) {
          message = e.what();
        }
        try {
          pg.all_reduce(t)->wait();
          ADD_FAILURE() << "a collective after the abort succeeded";
        } catch (const Error& e) {
          later = e.what();
        }
      },
      500ms);
  EXPECT_NE(message.find("all_reduce (sum) of 1000 float32 elements on rank 0 (ranks 0-1 of 2)"), std::string::npos)
      << message;
  EXPECT_NE(message.find("timed out after 500 ms"), std::string::npos) << message;
  EXPECT_NE(message.find("aborted"), std::string::npos) << message;
  EXPECT_NE(later.find("broke earlier"), std::string::npos) << later;
  EXPECT_LT(took, 10s);
}

// Rank 1 makes its communicator (through the NCCL API) but never issues a collective, so
// rank 0's first one cannot connect: NCCL >= 2.22 connects a communicator at its first
// collective, and on a blocking communicator the call waits on the host for the peers.
// The backend's communicators are non-blocking, so the call returns; it fails after the
// timeout with the collective's name, the communicator is aborted, and later collectives
// fail at once.
TEST(Nccl, AFirstCollectiveWhosePeerNeverConnectsTimesOut) {
  if (!two_devices()) GTEST_SKIP() << "needs 2 CUDA devices";
  auto store = std::make_shared<InProcessStore>();
  std::atomic<bool> finished{false};
  std::thread peer([&] {
    const std::string bytes = exchange_nccl_unique_id(*store, "comm0", 1, 2, 10s);
    ncclUniqueId id;
    std::copy(bytes.begin(), bytes.end(), id.internal);
    CudaDeviceGuard on(1);
    ncclComm_t comm = nullptr;
    ASSERT_EQ(ncclCommInitRank(&comm, 2, id, 1), ncclSuccess);
    while (!finished) std::this_thread::sleep_for(10ms);
    ncclCommAbort(comm);
  });
  std::string message, later;
  const auto t0 = std::chrono::steady_clock::now();
  {
    auto backend = make_nccl_backend(store, 0, 2, 500ms);
    Tensor t = ones({1000}, Device::cuda(0));
    try {
      backend->all_reduce(t, ReduceOp::kSum, "all_reduce of t")->wait();
      ADD_FAILURE() << "a collective whose peer never came succeeded";
    } catch (const Error& e) {
      message = e.what();
    }
    try {
      backend->all_reduce(t, ReduceOp::kSum, "all_reduce of t, again")->wait();
      ADD_FAILURE() << "a collective after the abort succeeded";
    } catch (const Error& e) {
      later = e.what();
    }
  }
  const auto took = std::chrono::steady_clock::now() - t0;
  finished = true;
  peer.join();
  EXPECT_NE(message.find("all_reduce of t timed out after 500 ms"), std::string::npos) << message;
  EXPECT_NE(message.find("aborted"), std::string::npos) << message;
  EXPECT_NE(later.find("broke earlier"), std::string::npos) << later;
  EXPECT_LT(took, 10s);
}

// Rank 1 takes part in the bootstrap but never makes its communicator: rank 0's init would
// wait for it for ever on a blocking communicator; here it fails after the timeout.
TEST(Nccl, ACommunicatorWhosePeerNeverJoinsTimesOut) {
  if (!two_devices()) GTEST_SKIP() << "needs 2 CUDA devices";
  auto store = std::make_shared<InProcessStore>();
  std::thread peer([&] { exchange_nccl_unique_id(*store, "comm0", 1, 2, 10s); });
  auto backend = make_nccl_backend(store, 0, 2, 500ms);
  Tensor t = ones({10}, Device::cuda(0));
  const auto t0 = std::chrono::steady_clock::now();
  try {
    backend->all_reduce(t, ReduceOp::kSum, "all_reduce of t")->wait();
    ADD_FAILURE() << "a collective without a communicator succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("could not create the communicator on cuda:0: its peers did not all join "
                                         "within 500 ms"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  try {
    backend->all_reduce(t, ReduceOp::kSum, "all_reduce of t, again")->wait();
    ADD_FAILURE() << "a collective after the failed init succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("broke earlier"), std::string::npos) << e.what();
  }
  peer.join();
}

// DDP with each rank's replica on its own device ends ten steps with the parameters of one
// process on the CPU with the whole batch. Float64: the tolerance of tests/comm/test_ddp.cpp.
TEST(NcclDdp, TwoRanksOnCudaMatchOneCpuProcess) {
  if (!two_devices()) GTEST_SKIP() << "needs 2 CUDA devices";
  constexpr int64_t kShard = 4;
  const auto single = train_single(2 * kShard, kFloat64);
  std::vector<std::shared_ptr<nn::Module>> models = {make_model(1, kFloat64), make_model(101, kFloat64)};
  std::vector<std::vector<int64_t>> logs(2);
  run_ranks(2, [&](ProcessGroup& pg) {
    const int r = pg.rank();
    const Device d = Device::cuda(r);
    auto& model = models[r];
    model->to(d);
    auto pgp = std::shared_ptr<ProcessGroup>(&pg, [](ProcessGroup*) {});
    DistributedDataParallel ddp(model, pgp, {.bucket_cap_bytes = 1024, .first_bucket_bytes = 256});
    optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
    for (int s = 0; s < 10; ++s) {
      auto [x, y] = batch(s, 2 * kShard, kFloat64);
      opt.zero_grad();
      loss_of(ddp.module(), x.narrow(0, r * kShard, kShard).to(d), y.narrow(0, r * kShard, kShard).to(d)).backward();
      ddp.synchronize();
      opt.step();
    }
    logs[r] = ddp.launch_log();
  });
  std::vector<Tensor> got;
  for (const Tensor& p : models[0]->parameters()) got.push_back(p.detach().to(Device::cpu()));
  EXPECT_LE(worst_ratio(got, single, 1e-12, 1e-10), 1.0);
  ASSERT_GT(logs[0].size(), 1u);
  EXPECT_LT(logs[0].front(), static_cast<int64_t>(models[0]->parameters().size())) << "no overlap with backward";
}

}  // namespace
}  // namespace ember::comm

#endif  // EMBER_COMM_NCCL
