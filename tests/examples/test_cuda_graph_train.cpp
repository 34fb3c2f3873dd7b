// --cuda-graph (examples/common/graph_step.h): the MLP trained by replaying one captured
// step per batch gives the losses, test accuracy and checkpoint (weights and optimizer
// state) of eager training on the same device, batch for batch: the same shuffle, the same
// kernels on the same values. Bit-identical on the emulated device, where the capturable
// Adam's bias corrections come from the host's pow as the eager step's do; on a GPU the
// corrections may differ by an ulp (tests/optim/test_capturable.cpp derives the bound), so
// there the losses agree to 1e-5 relative. Unsupported combinations are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <unistd.h>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/device.h"
#include "tests/examples/run_util.h"

namespace ember {
namespace {

using test::run;
namespace fs = std::filesystem;

const char* const kData = "/usr/share/datasets/fashion-mnist";
#ifdef EMBER_TEST_EMULATED_CUDA
constexpr bool kBitIdentical = true;
#else
constexpr bool kBitIdentical = false;
#endif

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

TEST(CudaGraphTrain, MlpReplayingACapturedStepTrainsAsEagerSteps) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device (EMBER_CUDA=EMULATED gives one)";
  if (!fs::exists(kData)) GTEST_SKIP() << "no Fashion-MNIST in " << kData;
  const fs::path dir = fs::temp_directory_path() / ("ember_graph_train_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // bf16 autocast and activation checkpointing (its forward again in backward) are
  // captured as well.
  for (const char* optimizer : {"adam", "sgd", "adamw --precision bf16 --checkpoint"}) {
    // 300 samples in batches of 32: 3 eager warm-up steps, the capture, 5 replays and an
    // eager partial batch of 12 in the first epoch; replays from the start in the second.
    const std::string flags = std::string(" --device cuda --data-on-device --limit-train 300 --batch-size 32 "
                                          "--limit-test 64 --epochs 2 --json --optimizer ") + optimizer;
    const fs::path eager_ckpt = dir / "eager.ckpt", graph_ckpt = dir / "graph.ckpt";
    auto [eager, rc_eager] = run(std::string(EMBER_MLP_BIN) + flags + " --save " + eager_ckpt.string() + " 2>&1");
    ASSERT_EQ(rc_eager, 0) << eager;
    auto [graph, rc_graph] =
        run(std::string(EMBER_MLP_BIN) + flags + " --cuda-graph --save " + graph_ckpt.string() + " 2>&1");
    ASSERT_EQ(rc_graph, 0) << graph;
    const nlohmann::json a = nlohmann::json::parse(test::last_line(eager));
    const nlohmann::json b = nlohmann::json::parse(test::last_line(graph));
    // 9 full batches an epoch: 6 replayed in the first (after 3 eager), 9 in the second.
    EXPECT_EQ(b["cuda_graph_replays"].get<int64_t>(), 15) << optimizer;
    EXPECT_EQ(a["cuda_graph_replays"].get<int64_t>(), 0) << optimizer;
    const auto la = a["epoch_train_loss"].get<std::vector<double>>();
    const auto lb = b["epoch_train_loss"].get<std::vector<double>>();
    ASSERT_EQ(la.size(), 2u);
    ASSERT_EQ(lb.size(), 2u);
    for (size_t e = 0; e < la.size(); ++e) {
      if (kBitIdentical)
        EXPECT_EQ(la[e], lb[e]) << optimizer << ", epoch " << e;
      else
        EXPECT_LE(std::fabs(la[e] - lb[e]), 1e-5 * std::fabs(la[e])) << optimizer << ", epoch " << e;
    }
    if (kBitIdentical) {
      EXPECT_EQ(a["test_accuracy"], b["test_accuracy"]) << optimizer;
      EXPECT_TRUE(slurp(eager_ckpt) == slurp(graph_ckpt)) << optimizer << ": the checkpoints differ";
    }
  }
  fs::remove_all(dir);
}

TEST(CudaGraphTrain, CombinationsItCannotRunAreClearErrors) {
  if (!fs::exists(kData)) GTEST_SKIP() << "no Fashion-MNIST in " << kData;
  const std::string mlp = std::string(EMBER_MLP_BIN) + " --limit-train 64 --cuda-graph";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {" --device cpu --data-on-device", "needs --device cuda"},
      {" --device cuda", "needs --data-on-device"},
      {" --device cuda --data-on-device --auto-microbatch", "not with --auto-microbatch"},
      {" --device cuda --data-on-device --prune 0.5", "not with --prune"},
  };
  for (const auto& [flags, message] : cases) {
    if (flags.find("cuda") != std::string::npos && cuda_device_count() == 0) continue;  // another error first
    auto [out, rc] = run(mlp + flags + " 2>&1");
    EXPECT_EQ(rc, 1) << flags << ": " << out;
    EXPECT_NE(out.find("--cuda-graph: " + message), std::string::npos) << flags << ": " << out;
  }
}

}  // namespace
}  // namespace ember
