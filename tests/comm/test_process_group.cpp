// Collectives at world sizes 1-4 (ranks as threads over an InProcessStore) for several
// sizes, reduce ops and dtypes, on CPU tensors (Gloo) and on CUDA tensors (NCCL; rank r
// on cuda:r, skipped without that many devices), and the timeouts: a rank that never
// joins, a rank that never calls the collective.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <thread>

#include "base/error.h"
#include "comm/process_group.h"
#include "core/ops.h"
#include "tests/comm/comm_test_util.h"

namespace ember::comm {
namespace {

using namespace std::chrono_literals;
using testing::run_ranks;

// Rank r's value at element i: small integers, exact in every dtype tested.
double value(int r, int64_t i) { return static_cast<double>((r + 1) * 3 + (i % 7)); }

Tensor rank_tensor(int r, int64_t n, DType dt, Device d = Device::cpu()) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = value(r, i);
  return tensor(v, {n}, dt).to(d);
}

// Rank r's device: the CPU, or cuda:r (NCCL takes one rank per device).
Device device_of(DeviceType type, int rank) { return type == DeviceType::CPU ? Device::cpu() : Device::cuda(rank); }

// Whether `size` ranks can run on `type` here.
bool runnable(DeviceType type, int size) {
#if EMBER_COMM_NCCL
  return type == DeviceType::CPU || cuda_device_count() >= size;
#else
  return type == DeviceType::CPU;
#endif
}

double expected(ReduceOp op, int size, int64_t i, bool integer) {
  double acc = value(0, i);
  for (int r = 1; r < size; ++r) {
    const double x = value(r, i);
    acc = op == ReduceOp::kMax ? std::max(acc, x) : op == ReduceOp::kMin ? std::min(acc, x) : acc + x;
  }
  if (op == ReduceOp::kAvg) acc = integer ? std::trunc(acc / size) : acc / size;
  return acc;
}

class Collectives : public ::testing::TestWithParam<std::tuple<int, DeviceType>> {
 protected:
  void SetUp() override {
    if (!runnable(type(), size())) GTEST_SKIP() << "needs " << size() << " CUDA devices and NCCL";
  }
  int size() const { return std::get<0>(GetParam()); }
  DeviceType type() const { return std::get<1>(GetParam()); }
  Device device(const ProcessGroup& pg) const { return device_of(type(), pg.rank()); }
};

TEST_P(Collectives, AllReduceEveryOpAndDtype) {
  const int size = this->size();
  run_ranks(size, [&](ProcessGroup& pg) {
    for (DType dt : {kFloat32, kFloat64, kInt64, kInt32, kBFloat16})
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin})
        for (int64_t n : {0, 1, 1023}) {
          Tensor t = rank_tensor(pg.rank(), n, dt, device(pg));
          pg.all_reduce(t, op)->wait();
          const bool integer = dt == kInt64 || dt == kInt32;
          std::vector<double> got = t.to_vector<double>();
          for (int64_t i = 0; i < n; ++i) {
            double want = expected(op, size, i, integer);
            if (dt == kBFloat16) want = static_cast<float>(BFloat16(static_cast<float>(want)));
            ASSERT_NEAR(got[i], want, dt == kBFloat16 ? 0.02 * std::abs(want) : 1e-6)
                << dtype_name(dt) << " " << reduce_op_name(op) << " n=" << n << " i=" << i;
          }
        }
  });
}

TEST_P(Collectives, BroadcastAllGatherReduceScatterBarrier) {
  const int size = this->size();
  run_ranks(size, [&](ProcessGroup& pg) {
    const int r = pg.rank();
    const Device d = device(pg);
    for (int root = 0; root < size; ++root) {
      Tensor t = rank_tensor(r, 1023, kFloat32, d);
      pg.broadcast(t, root)->wait();
      EXPECT_TRUE(allclose(t.to(Device::cpu()), rank_tensor(root, 1023, kFloat32))) << "root " << root;
    }
    Tensor in = rank_tensor(r, 5, kInt64, d);
    Tensor out = full({size, 5}, -1, TensorOptions(kInt64, d));  // poisoned: every element must be written
    pg.all_gather(out, in)->wait();
    for (int q = 0; q < size; ++q)
      EXPECT_TRUE(allclose(out.select(0, q).to(Device::cpu()), rank_tensor(q, 5, kInt64)));

    Tensor big = rank_tensor(r, 3 * size, kFloat64, d);
    Tensor mine = full({3}, std::nan(""), TensorOptions(kFloat64, d));
    pg.reduce_scatter(mine, big, ReduceOp::kSum)->wait();
    for (int64_t i = 0; i < 3; ++i)
      EXPECT_DOUBLE_EQ(mine.to_vector<double>()[i], expected(ReduceOp::kSum, size, r * 3 + i, false));
    pg.barrier()->wait();
  });
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<int, DeviceType>>& info) {
  return std::string(device_type_name(std::get<1>(info.param))) + "_" + std::to_string(std::get<0>(info.param));
}

INSTANTIATE_TEST_SUITE_P(WorldSize, Collectives,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(DeviceType::CPU, DeviceType::CUDA)),
                         case_name);

class LargeAllReduce : public ::testing::TestWithParam<DeviceType> {};

// 16 Mi float32 elements (64 MiB per rank): Gloo's ring with many segments; NCCL's
// chunks (on the emulated device, many rounds through its shared slots).
TEST_P(LargeAllReduce, TwoRanks) {
  const DeviceType type = GetParam();
  if (!runnable(type, 2)) GTEST_SKIP() << "needs 2 CUDA devices and NCCL";
  run_ranks(2, [&](ProcessGroup& pg) {
    const int64_t n = 16 << 20;
    Tensor t = full({n}, pg.rank() + 1.0, TensorOptions(kFloat32, device_of(type, pg.rank())));
    pg.all_reduce(t, ReduceOp::kSum)->wait();
    EXPECT_EQ(t.to_vector<float>()[0], 3.0f);
    EXPECT_EQ(t.to_vector<float>()[n - 1], 3.0f);
    EXPECT_EQ(sum(t).item<double>(), 3.0 * n);
  });
}

INSTANTIATE_TEST_SUITE_P(Device, LargeAllReduce, ::testing::Values(DeviceType::CPU, DeviceType::CUDA),
                         [](const auto& info) { return std::string(device_type_name(info.param)); });

TEST(Collectives, OrderIsIssueOrder) {
  run_ranks(3, [](ProcessGroup& pg) {
    std::vector<Tensor> ts;
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < 20; ++k) {
      ts.push_back(full({100 + k}, k + pg.rank(), kFloat32));
      works.push_back(pg.all_reduce(ts.back()));
    }
    for (int k = 19; k >= 0; --k) works[k]->wait();  // waiting out of order is fine
    for (int k = 0; k < 20; ++k) EXPECT_EQ(ts[k].to_vector<float>()[0], 3.0f * k + 3.0f);
  });
}

TEST(Collectives, TwoGroupsOnOneStore) {
  auto store = std::make_shared<InProcessStore>();
  std::vector<std::thread> threads;
  std::vector<double> got(4);
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      ProcessGroup a(store, r, 2, {.timeout = std::chrono::seconds(10)});
      ProcessGroup b(store, r, 2, {.timeout = std::chrono::seconds(10)});
      Tensor x = full({3}, r + 1.0), y = full({3}, 10.0 * (r + 1));
      auto wa = a.all_reduce(x);
      auto wb = b.all_reduce(y);
      wb->wait();
      wa->wait();
      got[r * 2] = x.to_vector<double>()[0];
      got[r * 2 + 1] = y.to_vector<double>()[0];
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(got, (std::vector<double>{3, 30, 3, 30}));
}

TEST(Collectives, BadArgumentsAreErrors) {
  run_ranks(2, [](ProcessGroup& pg) {
    EXPECT_THROW(pg.all_gather(zeros({3}), zeros({2})), Error);
    EXPECT_THROW(pg.all_reduce(zeros({4, 4}).t()), Error);  // not contiguous
    EXPECT_THROW(pg.all_reduce(zeros({2}, kBool), ReduceOp::kSum), Error);
    EXPECT_THROW(pg.broadcast(zeros({2}), 5), Error);
    EXPECT_THROW(pg.reduce_scatter(zeros({2}), zeros({5})), Error);
  });
  auto store = std::make_shared<InProcessStore>();
  EXPECT_THROW(ProcessGroup(store, 2, 2), Error);
  EXPECT_THROW(ProcessGroup(store, 0, 0), Error);
}

TEST(Timeouts, RankThatNeverJoinsIsNamed) {
  auto store = std::make_shared<InProcessStore>();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    ProcessGroup pg(store, 0, 3, {.timeout = 300ms});  // ranks 1 and 2 never come
    FAIL() << "rendezvous did not time out";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("ranks 1, 2 of 3 never joined"), std::string::npos) << m;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST(Timeouts, CollectiveARankNeverCallsFails) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string message;
  run_ranks(
      2,
      [&](ProcessGroup& pg) {
        if (pg.rank() == 1) {  // rank 1 joins, then never calls the all-reduce
          std::this_thread::sleep_for(1500ms);
          return;
        }
        Tensor t = ones({1000});
        try {
          pg.all_reduce(t)->wait();
          ADD_FAILURE() << "all_reduce returned";
        } catch (const Error& e) {
          message = e.what();
        }
      },
      500ms);
  EXPECT_NE(message.find("all_reduce (sum) of 1000 float32 elements"), std::string::npos) << message;
  EXPECT_NE(message.find("ranks 0-1 of 2"), std::string::npos) << message;
  std::cout << "the error: " << message << "\n";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
}

TEST(Timeouts, WorkWaitHasItsOwnTimeout) {
  Work w("all_reduce of 7 float32 elements on rank 0 (ranks 0-1 of 2)");
  try {
    w.wait(20ms);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("7 float32 elements"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("timed out after 20 ms"), std::string::npos);
  }
  w.finish();
  w.wait(20ms);
  EXPECT_TRUE(w.completed());
}

}  // namespace
}  // namespace ember::comm
