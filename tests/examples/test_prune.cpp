// ember_mlp --prune: the report's sparsity and weight bytes are exact, the CSR model
// classifies as the fine-tuned masked one did, and the emulated cuda device (when built)
// reports the same as the CPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/device.h"
#include "tests/examples/run_util.h"

namespace ember {
namespace {

const char* const kData = "/usr/share/datasets/fashion-mnist";
const std::string kFlags = " --limit-train 2048 --limit-test 512 --prune 0.9 --json 2>&1";

nlohmann::json prune_report(const std::string& device) {
  auto [out, rc] = test::run(std::string(EMBER_MLP_BIN) + " --device " + device + kFlags);
  EXPECT_EQ(rc, 0) << out;
  return nlohmann::json::parse(test::last_line(out)).at("prune");
}

TEST(Prune, MlpReportsExactSparsityAndWeightBytes) {
  if (!std::filesystem::exists(kData)) GTEST_SKIP() << "no Fashion-MNIST in " << kData;
  const nlohmann::json p = prune_report("cpu");
  const int64_t weights = 784 * 512 + 512 * 256 + 256 * 10, kept = weights - 481536;  // 90% of 535040 pruned
  EXPECT_DOUBLE_EQ(p["sparsity"].get<double>(), 0.9);
  EXPECT_EQ(p["weight_bytes_dense"].get<int64_t>(), 4 * weights);
  EXPECT_EQ(p["weight_bytes_sparse"].get<int64_t>(), 8 * kept + 4 * (513 + 257 + 11));  // values, col_idx, row_ptr
  EXPECT_EQ(p["sparse_backward_index_bytes"].get<int64_t>(), 8 * kept + 4 * (785 + 513 + 257));
  // The CSR layers compute what the masked dense ones did, up to rounding.
  EXPECT_NEAR(p["accuracy_sparse"].get<double>(), p["accuracy_finetuned"].get<double>(), 0.01);
  EXPECT_GT(p["accuracy_sparse"].get<double>(), 0.5);

  if (cuda_device_count() == 0) return;
  const nlohmann::json c = prune_report("cuda");
  EXPECT_EQ(c["weight_bytes_sparse"], p["weight_bytes_sparse"]);
  EXPECT_NEAR(c["accuracy_sparse"].get<double>(), p["accuracy_sparse"].get<double>(), 0.03);
}

TEST(Prune, BadSparsityIsAnError) {
  // Refused as the command line is parsed (Note [Flag ranges]): CLI11's status for a bad value.
  auto [out, rc] = test::run(std::string(EMBER_MLP_BIN) + " --prune 1.5 --limit-train 64 2>&1");
  EXPECT_EQ(rc, 105);
  EXPECT_NE(out.find("ember_mlp: --prune: '1.5' is outside [0, 1]"), std::string::npos) << out;
}

}  // namespace
}  // namespace ember
