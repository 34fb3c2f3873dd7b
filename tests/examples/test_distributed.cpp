// The MLP example under ember-run with two processes: only rank 0 reports, the --json
// line says world_size 2, and the saved parameters equal the single-process run's
// (same global batch, same samples per step) to float32 rounding.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/ops.h"
#include "core/safetensors.h"
#include "tests/comm/process_util.h"
#include "tests/examples/run_util.h"

namespace ember {
namespace {

using test::last_line;
using test::run;
using comm::free_port;



TEST(Distributed, MlpUnderEmberRunMatchesOneProcess) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "no Fashion-MNIST";
  const auto dir = std::filesystem::temp_directory_path() / ("ember_dist_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  // On the CPU: Gloo exchanges CPU tensors (an emulated CUDA device would be --device auto's pick).
  const std::string flags = " --device cpu --limit-train 1024 --batch-size 64 --epochs 1 --optimizer sgd --lr 0.05 --json --save ";
  const int port = free_port();
  auto [two, rc2] = run(std::string(EMBER_RUN_BIN) + " --nproc-per-node 2 --master-port " + std::to_string(port) + " " +
                        EMBER_MLP_BIN + flags + (dir / "two.safetensors").string() + " 2>&1");
  ASSERT_EQ(rc2, 0) << two;
  auto [one, rc1] = run(std::string(EMBER_MLP_BIN) + flags + (dir / "one.safetensors").string() + " 2>&1");
  ASSERT_EQ(rc1, 0) << one;

  EXPECT_EQ(two.find("[rank 1]"), std::string::npos) << "rank 1 printed:\n" << two;
  std::string line = last_line(two);
  ASSERT_EQ(line.rfind("[rank 0] ", 0), 0u) << two;
  auto j = nlohmann::json::parse(line.substr(9));
  EXPECT_EQ(j["world_size"], 2);
  EXPECT_NEAR(j["train_loss"].get<double>(), nlohmann::json::parse(last_line(one))["train_loss"].get<double>(), 1e-4);

  // Same steps on the same samples: the parameters differ only by the order of float32
  // sums (each rank sums 32 samples, then the two halves are averaged): float32's 6e-8
  // relative rounding per gradient, over 16 SGD steps of lr 0.05. Measured: 4.5e-8 at
  // most. 1e-5 leaves room for other CPUs' summation orders and is far below what a
  // wrong shard or a missing average gives (weights move by 1e-3 and more).
  auto a = load_safetensors((dir / "two.safetensors").string()), b = load_safetensors((dir / "one.safetensors").string());
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  double worst = 0;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    if (a.tensors[i].second.dtype() != kFloat32) continue;  // optimizer step counters
    worst = std::max(worst, max(abs(sub(a.tensors[i].second, b.tensors[i].second))).item<double>());
  }
  std::printf("max |two processes - one process| over the saved parameters: %.3g\n", worst);
  EXPECT_LT(worst, 1e-5);
  std::filesystem::remove_all(dir);
}

// Multi-node on one machine: two ember-run invocations (--nnodes 2, --node-rank 0 and 1,
// 127.0.0.1) form one job of two ranks.
TEST(Distributed, TwoEmberRunNodesFormOneJob) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "no Fashion-MNIST";
  const std::string port = std::to_string(free_port());
  // A short timeout: if one side fails, the other gives up soon instead of after 300 s.
  const std::string node = std::string("EMBER_COMM_TIMEOUT_S=30 ") + EMBER_RUN_BIN +
                           " --nproc-per-node 1 --nnodes 2 --master-addr 127.0.0.1 " +
                           "--master-port " + port + " --node-rank ";
  const std::string prog = std::string(" ") + EMBER_MLP_BIN + " --limit-train 512 --batch-size 64 --json";
  auto [out, rc] = run("(" + node + "1" + prog + " > /dev/null 2>&1 &) ; " + node + "0" + prog + " 2>&1");
  ASSERT_EQ(rc, 0) << out;
  auto j = nlohmann::json::parse(last_line(out).substr(9));
  EXPECT_EQ(j["world_size"], 2);
}

}  // namespace
}  // namespace ember
