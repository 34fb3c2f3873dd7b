// The MLP and CNN examples on --device cuda (in CI: the emulated device) train as they do
// on the CPU, and the README's OOM demos work on a small device.
//
// Note [Comparing the CPU's and the CUDA device's training]. Both run the same float32
// steps in a different summation order (OpenBLAS or Winograd on the CPU, the CUDA
// backend's SGEMM and im2col there), so each output of a product of K terms differs by at
// most about K * 2^-24 relative, and one step's loss by about that. K is at most 784 in
// the MLP (its first layer: 4.7e-5) and 3136 in the CNN (its first linear layer, 64 x 7 x 7
// inputs: 1.9e-4); each run's bound is twice its worst case. A wrong gradient or update in
// any layer moves the loss by 1e-2 and more. The bound holds over the steps while their
// differences do not compound. Adam normalizes each update by the gradient's own
// magnitude: over the MLP's 200 steps of 32 samples, measured on the emulated device, the
// epoch losses agree to 4.8e-7 relative. The CNN's max-pools route each window's gradient
// to its largest input, which differs between the runs where two inputs lie within
// rounding; Adam scales such small differences up to whole steps, and over 250 steps of 2
// samples (small batches keep the emulated run short) the CPU's own conv variants then
// differed by 1e-3. SGD moves a parameter by lr times its gradient: at lr 0.001 (momentum
// 0.9) the CNN's runs agree to 7e-9 over its 250 steps, and the CPU's variants to 1e-6 up
// to 400 steps on other slices of the data.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/device.h"
#include "tests/examples/run_util.h"

namespace ember {
namespace {

using test::run;

// The bound on the epoch losses' relative difference for a model whose largest product
// sums `terms` terms (Note [Comparing the CPU's and the CUDA device's training]).
constexpr double same_loss(int terms) { return 2 * terms * 0x1p-24; }
const char* const kData = "/usr/share/datasets/fashion-mnist";

nlohmann::json last_json(const std::string& out) { return nlohmann::json::parse(test::last_line(out)); }

#define NEED_CUDA_AND_DATA()                                                                   \
  do {                                                                                         \
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device (EMBER_CUDA=EMULATED gives one)"; \
    if (!std::filesystem::exists(kData)) GTEST_SKIP() << "no Fashion-MNIST in " << kData;     \
  } while (0)

void expect_same_training(const std::string& bin, const std::string& flags, double tolerance) {
  auto [cpu, rc_cpu] = run(bin + " --device cpu" + flags + " 2>&1");
  ASSERT_EQ(rc_cpu, 0) << cpu;
  auto [cuda, rc_cuda] = run(bin + " --device cuda" + flags + " 2>&1");
  ASSERT_EQ(rc_cuda, 0) << cuda;
  const nlohmann::json a = last_json(cpu), b = last_json(cuda);
  EXPECT_EQ(b["device"], "cuda:0");
  const auto la = a["epoch_train_loss"].get<std::vector<double>>(), lb = b["epoch_train_loss"].get<std::vector<double>>();
  ASSERT_EQ(la.size(), lb.size());
  for (size_t e = 0; e < la.size(); ++e)
    EXPECT_LE(std::fabs(la[e] - lb[e]), tolerance * std::fabs(la[e])) << "epoch " << e << ": cpu " << la[e] << ", cuda " << lb[e];
  EXPECT_LT(lb.back(), 2.2) << "the loss fell from log(10) = 2.30";
  EXPECT_NEAR(b["test_accuracy"].get<double>(), a["test_accuracy"].get<double>(), 0.02);
}

TEST(TrainDevices, MlpOnCudaTrainsAsOnTheCpu) {
  NEED_CUDA_AND_DATA();
  // 200 steps of 32 samples, then 512 test images.
  expect_same_training(EMBER_MLP_BIN, " --limit-train 6400 --batch-size 32 --limit-test 512 --json", same_loss(784));
}

TEST(TrainDevices, CnnOnCudaTrainsAsOnTheCpu) {
  NEED_CUDA_AND_DATA();
  // 250 steps of 2 samples, then 64 test images: the emulated device takes about 0.05 s
  // for such a step, 0.3 s for one of 16 samples (40 of those took as long).
  expect_same_training(EMBER_CNN_BIN,
                       " --limit-train 500 --batch-size 2 --optimizer sgd --lr 0.001 --limit-test 64 --json",
                       same_loss(64 * 7 * 7));
}

TEST(TrainDevices, MemoryCapOnCudaStopsWithTheReportOrSplitsTheStep) {
  NEED_CUDA_AND_DATA();
  // The README's demo on a 64 MiB (emulated) device: a 2 MiB budget cannot hold a step of
  // 64 samples; --auto-microbatch takes the same steps in pieces that fit.
  const std::string base = std::string("EMBER_EMU_DEVICE_MEMORY=64MiB ") + EMBER_CNN_BIN +
                           " --device cuda --limit-train 256 --batch-size 64 --limit-test 64 --max-memory 2MiB";
  auto [stopped, rc_stop] = run(base + " 2>&1");
  EXPECT_EQ(rc_stop, 1) << stopped;
  EXPECT_NE(stopped.find("out of memory"), std::string::npos) << stopped;
  EXPECT_NE(stopped.find("cuda:0"), std::string::npos) << stopped;
  auto [split, rc_split] = run(base + " --auto-microbatch --json 2>&1");
  ASSERT_EQ(rc_split, 0) << split;
  const nlohmann::json j = last_json(split);
  EXPECT_GT(j["micro_batch"].get<int64_t>(), 0);
  EXPECT_LT(j["micro_batch"].get<int64_t>(), 64);
}

TEST(TrainDevices, CudaWithoutADeviceIsAClearError) {
  if (!std::filesystem::exists(kData)) GTEST_SKIP() << "no Fashion-MNIST in " << kData;
  auto [out, rc] = run(std::string("CUDA_VISIBLE_DEVICES= ") + EMBER_MLP_BIN + " --device cuda --limit-train 64 2>&1");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(out.find("no CUDA device is available") != std::string::npos ||
              out.find("no CUDA backend") != std::string::npos) << out;
}

}  // namespace
}  // namespace ember
