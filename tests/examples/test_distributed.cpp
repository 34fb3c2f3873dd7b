// The MLP example under ember-run with two processes, on the CPU (Gloo) and on two CUDA
// devices (NCCL; in the emulated build, two emulated devices and the emulated NCCL): only
// rank 0 reports, the --json line says world_size 2, and the saved parameters equal the
// single-process run's (same global batch, same samples per step) to float32 rounding.
// A group restarted after a rank dies resumes from its checkpoint.
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



// (example binary, device)
class Distributed : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(Distributed, UnderEmberRunMatchesOneProcess) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "no Fashion-MNIST";
  const auto& [example, device] = GetParam();
  const bool cnn = example == "cnn";
  const std::string bin = cnn ? EMBER_CNN_BIN : EMBER_MLP_BIN;
  std::string env;  // for the commands
  if (device == "cuda") {
#if EMBER_CUDA_EMULATED
    env = "EMBER_EMU_DEVICES=2 ";
#else
    if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 CUDA devices";
#endif
  }
  const auto dir =
      std::filesystem::temp_directory_path() / ("ember_dist_" + example + device + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  // The CNN's steps cost 10x the MLP's: fewer of them.
  const std::string flags = " --device " + device +
                            (cnn ? " --limit-train 256 --limit-test 128 --batch-size 32"
                                 : " --limit-train 1024 --limit-test 512 --batch-size 64") +
                            " --epochs 1 --optimizer sgd --lr 0.05 --json --save ";
  const int port = free_port();
  auto [two, rc2] = run(env + EMBER_RUN_BIN + " --nproc-per-node 2 --master-port " + std::to_string(port) + " " + bin +
                        flags + (dir / "two.safetensors").string() + " 2>&1");
  ASSERT_EQ(rc2, 0) << two;
  auto [one, rc1] = run(env + bin + flags + (dir / "one.safetensors").string() + " 2>&1");
  ASSERT_EQ(rc1, 0) << one;

  EXPECT_EQ(two.find("[rank 1]"), std::string::npos) << "rank 1 printed:\n" << two;
  std::string line = last_line(two);
  ASSERT_EQ(line.rfind("[rank 0] ", 0), 0u) << two;
  auto j = nlohmann::json::parse(line.substr(9));
  EXPECT_EQ(j["world_size"], 2);
  EXPECT_NEAR(j["train_loss"].get<double>(), nlohmann::json::parse(last_line(one))["train_loss"].get<double>(), 1e-4);

  // Same steps on the same samples: the parameters differ only by the order of float32
  // sums (each rank sums its half of the batch, then the two halves are averaged):
  // float32's 6e-8 relative rounding per gradient, over 8 or 16 SGD steps of lr 0.05.
  // Measured on the CPU: 3e-8 at most for the MLP, 3e-6 for the CNN, whose max-pool
  // windows amplify rounding: where a window's two largest inputs differ by less than
  // the rounding, the two runs route that step's gradient to different elements. The
  // optimizer's momentum buffers, mostly the last steps' gradients, carry those jumps
  // undamped (3e-5 measured) and are left out: the parameters are the model. 1e-5 is far
  // below what a wrong shard or a missing average gives (weights move by 1e-3 and more).
  auto a = load_safetensors((dir / "two.safetensors").string()), b = load_safetensors((dir / "one.safetensors").string());
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  double worst = 0;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    if (a.tensors[i].first.rfind("optimizer.", 0) == 0) continue;
    worst = std::max(worst, max(abs(sub(a.tensors[i].second, b.tensors[i].second))).item<double>());
  }
  std::printf("max |two processes - one process| over the saved parameters: %.3g\n", worst);
  EXPECT_LT(worst, 1e-5);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Examples, Distributed,
                         ::testing::Combine(::testing::Values("mlp", "cnn"), ::testing::Values("cpu", "cuda")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

// --zero 2 saves what plain DDP saves: the parameters and the full (consolidated) Adam
// state. The update is the same elementwise op on the same averaged gradients, so
// measured they are bit-equal; 1e-6 leaves room for another reduction order.
TEST(DistributedZero, ZeroTwoSavesWhatPlainDdpSaves) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "no Fashion-MNIST";
  const auto dir = std::filesystem::temp_directory_path() / ("ember_zero_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string flags = " --device cpu --limit-train 1024 --limit-test 256 --batch-size 64 --epochs 1 "
                            "--optimizer adam --json --save ";
  for (const char* zero : {"0", "2"}) {
    auto [out, rc] = run(std::string(EMBER_RUN_BIN) + " --nproc-per-node 2 --master-port " +
                         std::to_string(free_port()) + " " + EMBER_MLP_BIN + flags +
                         (dir / (std::string(zero) + ".safetensors")).string() + " --zero " + zero + " 2>&1");
    ASSERT_EQ(rc, 0) << out;
  }
  auto a = load_safetensors((dir / "0.safetensors").string()), b = load_safetensors((dir / "2.safetensors").string());
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    ASSERT_EQ(a.tensors[i].first, b.tensors[i].first);
    const Tensor& x = a.tensors[i].second;
    const double worst = max(abs(sub(x, b.tensors[i].second))).item<double>();
    EXPECT_LE(worst, 1e-6 * std::max(1.0, max(abs(x)).item<double>())) << a.tensors[i].first;
  }
  std::filesystem::remove_all(dir);
}

// Note [Resuming after a restart] (examples/common/restart.h): one fixed command line
// under ember-run --max-restarts 1, --save and --resume naming the same file. The first
// start finds no checkpoint and trains from the beginning; rank 1 is killed once epoch
// 1's checkpoint is on disk (the test hook EMBER_TEST_CRASH_AFTER_CHECKPOINT); the
// restarted group resumes from it and trains epoch 2 alone. The same command without the
// crash is the uninterrupted run: both take the same steps on the same samples in the
// same order with the same threads (ember-run gives each rank cores / 2) and the
// checkpoint restores parameters and momentum exactly, so every saved tensor is equal,
// bit for bit.
TEST(DistributedRestart, ARestartedGroupResumesFromItsCheckpoint) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "no Fashion-MNIST";
  const auto dir = std::filesystem::temp_directory_path() / ("ember_restart_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto job = [&](const std::string& name, const std::string& env) {
    const std::string ck = (dir / (name + ".safetensors")).string();
    return run(env + EMBER_RUN_BIN + " --nproc-per-node 2 --max-restarts 1 --master-port " +
               std::to_string(free_port()) + " " + EMBER_MLP_BIN +
               " --device cpu --limit-train 512 --limit-test 128 --batch-size 64 --epochs 2 --optimizer sgd --lr 0.05"
               " --save " + ck + " --resume " + ck + " 2>&1");
  };
  auto [crashed, rc] = job("crashed", "EMBER_TEST_CRASH_AFTER_CHECKPOINT=1 ");
  ASSERT_EQ(rc, 0) << crashed;
  auto [straight, rc_straight] = job("straight", "");
  ASSERT_EQ(rc_straight, 0) << straight;

  auto count = [](const std::string& s, const std::string& part) {
    size_t n = 0;
    for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(crashed, "is not written yet: training from the start"), 1u) << crashed;
  EXPECT_EQ(count(crashed, "rank 1 (local rank 1, pid "), 1u) << crashed;
  EXPECT_EQ(count(crashed, "was killed by signal 9"), 1u) << crashed;
  EXPECT_EQ(count(crashed, "restarting the group (1 of 1)"), 1u) << crashed;
  EXPECT_EQ(count(crashed, "restart 1: resumed from "), 1u) << crashed;
  EXPECT_EQ(count(crashed, "after epoch 1"), 1u) << crashed;
  EXPECT_EQ(count(crashed, "epoch 1/2: "), 1u) << "epoch 1 trained again:\n" << crashed;
  EXPECT_EQ(count(crashed, "epoch 2/2: "), 1u) << crashed;

  auto a = load_safetensors((dir / "crashed.safetensors").string());
  auto b = load_safetensors((dir / "straight.safetensors").string());
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    ASSERT_EQ(a.tensors[i].first, b.tensors[i].first);
    EXPECT_EQ(a.tensors[i].second.to_vector<double>(), b.tensors[i].second.to_vector<double>()) << a.tensors[i].first;
  }
  EXPECT_EQ(a.metadata, b.metadata);
  std::filesystem::remove_all(dir);
}

// Every rank reads --resume's file. Ranks that see it and ranks that do not (nodes without
// a shared folder; here each rank in a folder of its own) would train different epochs:
// an error, on every rank alike, before the data is read.
TEST(DistributedRestart, ACheckpointOnlySomeRanksSeeIsAnError) {
  const auto dir = std::filesystem::temp_directory_path() / ("ember_resume_seen_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "r0");
  std::filesystem::create_directories(dir / "r1");
  std::fclose(std::fopen((dir / "r0" / "ck.safetensors").c_str(), "w"));
  auto [out, rc] = run(std::string(EMBER_RUN_BIN) + " --nproc-per-node 2 --master-port " + std::to_string(free_port()) +
                       " sh -c 'cd " + dir.string() + "/r$RANK && exec " + EMBER_MLP_BIN +
                       " --device cpu --resume ck.safetensors' 2>&1");
  EXPECT_EQ(rc, 1) << out;
  // The first rank to fail is named; ember-run may stop the other before it prints.
  EXPECT_NE(out.find("] ember_mlp: error: --resume: 'ck.safetensors' exists for 1 of the 2 processes"),
            std::string::npos)
      << out;
  std::filesystem::remove_all(dir);
}

// Multi-node on one machine: two ember-run invocations (--nnodes 2, --node-rank 0 and 1,
// 127.0.0.1) form one job of two ranks.
TEST(DistributedNodes, TwoEmberRunNodesFormOneJob) {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "no Fashion-MNIST";
  const std::string port = std::to_string(free_port());
  // A short timeout: if one side fails, the other gives up soon instead of after 300 s.
  // Several nodes need one secret given (docs/reliability.md, "Rendezvous").
  const std::string node = std::string("EMBER_COMM_TIMEOUT_S=30 EMBER_JOB_SECRET=two-nodes-secret-0123456789 ") +
                           EMBER_RUN_BIN +
                           " --nproc-per-node 1 --nnodes 2 --master-addr 127.0.0.1 " +
                           "--master-port " + port + " --node-rank ";
  // The CPU: both "nodes" are this machine, which has (at most) one emulated GPU for both.
  const std::string prog = std::string(" ") + EMBER_MLP_BIN + " --device cpu --limit-train 512 --batch-size 64 --json";
  auto [out, rc] = run("(" + node + "1" + prog + " > /dev/null 2>&1 &) ; " + node + "0" + prog + " 2>&1");
  ASSERT_EQ(rc, 0) << out;
  auto j = nlohmann::json::parse(last_line(out).substr(9));
  EXPECT_EQ(j["world_size"], 2);
}

}  // namespace
}  // namespace ember
