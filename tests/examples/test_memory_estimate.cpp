// The memory estimate (optim/memory_estimate.h) against the allocator's measurement: for
// both examples' models on the test device, at batch 32, 128 and 1024, float32 and bf16,
// with and without checkpointing, the estimated step peak is within 10% of the peak
// allocated bytes of two real training steps (the second has the optimizer's state live
// throughout). Each config prints a line of the table in docs/memory.md. Runs on the CPU,
// and on the emulated CUDA device as memory_estimate.cuda (tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>

#include "examples/common/models.h"
#include "tests/device.h"
#include "tests/examples/run_util.h"

namespace ember {
namespace {

using ModelFn = std::function<std::shared_ptr<nn::Sequential>()>;

int64_t allocated(Device d) { return memory_stats(d).at("allocated_bytes.all.current"); }

std::shared_ptr<nn::Sequential> on_meta(const ModelFn& make) {
  const Device saved = default_device();
  set_default_device(Device::meta());
  auto m = make();
  set_default_device(saved);
  return m;
}

// Peak allocated bytes of two steps of `batch` samples (Adam, cross entropy), beyond what
// was allocated before the model was made.
int64_t measured_peak(const ModelFn& make, int64_t batch, bool bf16, bool checkpoint) {
  const Device d = test::test_device();
  empty_cache(d);
  const int64_t base = allocated(d);
  int64_t peak = 0;
  {
    std::shared_ptr<nn::Module> model = make();
    if (checkpoint) model = nn::checkpoint_blocks(dynamic_cast<nn::Sequential&>(*model));
    optim::Adam opt(model->parameters(), {});
    const Tensor x = randn({batch, 1, 28, 28}), y = zeros({batch}, kInt64);
    nn::CrossEntropyLoss criterion;
    reset_peak_memory_stats(d);
    for (int step = 0; step < 2; ++step) {
      opt.zero_grad();
      Tensor loss;
      {
        std::optional<AutocastScope> autocast;
        if (bf16) autocast.emplace(kBFloat16);
        loss = criterion((*model)(x), y);
      }
      loss.backward();
      opt.step();
    }
    peak = memory_stats(d).at("allocated_bytes.all.peak") - base;
  }
  return peak;
}

void check_model(const char* name, const ModelFn& make) {
  // One CPU thread for the CPU: with more, how many of the Winograd kernels' tasks hold
  // their scratch at once depends on timing, and the estimate counts them all (an upper
  // bound). The emulated device's kernels take two (its allocations do not depend on it).
  set_num_threads(test::on_cuda() ? 2 : 1);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t batch : {32, 128, 1024})
    for (bool bf16 : {false, true})
      for (bool checkpoint : {false, true}) {
        auto meta = on_meta(make);
        const optim::MemoryEstimateOptions o{.target = test::test_device(),
                                             .autocast = bf16 ? std::optional(kBFloat16) : std::nullopt,
                                             .checkpoint = checkpoint};
        const int64_t estimated = optim::memory_estimate(*meta, {batch, 1, 28, 28}, o).step_peak_bytes;
        const int64_t measured = measured_peak(make, batch, bf16, checkpoint);
        const double ratio = static_cast<double>(estimated) / static_cast<double>(measured);
        std::printf("| %s | %s | %lld | %s | %s | %lld | %lld | %.3f |\n", name, test::test_device().str().c_str(),
                    static_cast<long long>(batch), bf16 ? "bf16" : "fp32", checkpoint ? "yes" : "no",
                    static_cast<long long>(estimated), static_cast<long long>(measured), ratio);
        EXPECT_NEAR(ratio, 1.0, 0.1) << name << " batch " << batch << (bf16 ? " bf16" : " fp32")
                                     << (checkpoint ? " checkpointed" : "") << ": estimated " << estimated
                                     << ", measured " << measured;
      }
  std::printf("%s: %.1f s\n", name, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

TEST(MemoryEstimate, MlpWithinTenPercentOfTheMeasuredPeak) { check_model("mlp", examples::make_mlp); }
TEST(MemoryEstimate, CnnWithinTenPercentOfTheMeasuredPeak) { check_model("cnn", [] { return examples::make_cnn(); }); }

TEST(MemoryEstimate, RowsJsonShardsAndTheBatchThatFits) {
  auto meta = on_meta(examples::make_mlp);
  const optim::MemoryEstimate e = optim::memory_estimate(*meta, {128, 1, 28, 28});
  EXPECT_EQ(e.modules.front().name, "");
  EXPECT_EQ(e.modules.back().name, "(outside modules)");
  int64_t params = 0;
  for (const auto& m : e.modules)
    if (m.name == "1") {  // Linear(784, 512): 1.53 MiB weight, 2 KiB bias
      EXPECT_EQ(m.parameters, (784 * 512 * 4 + 511) / 512 * 512 + 2048);
      EXPECT_EQ(m.optimizer_state, 2 * m.parameters);  // Adam: two moments
      EXPECT_GT(m.activations, 0);
      params = m.parameters;
    }
  EXPECT_GT(params, 0);
  const nlohmann::json j = nlohmann::json::parse(e.json());
  EXPECT_EQ(j.at("estimated_step_peak_bytes").get<int64_t>(), e.step_peak_bytes);
  EXPECT_EQ(j.at("modules").size(), e.modules.size());
  EXPECT_NE(e.str().find("estimated step peak"), std::string::npos);

  // Sharding the state over 4 ranks saves 3/4 of it from the peak.
  optim::MemoryEstimateOptions sharded;
  sharded.optimizer_state_shards = 4;
  const optim::MemoryEstimate s = optim::memory_estimate(*meta, {128, 1, 28, 28}, sharded);
  EXPECT_LT(s.optimizer_state, e.optimizer_state / 4 + 8 * 512);
  EXPECT_EQ(e.step_peak_bytes - s.step_peak_bytes, e.optimizer_state - s.optimizer_state);

  // In micro-batches of 32, the forward leaves a piece's activations, not the batch's.
  optim::MemoryEstimateOptions pieces;
  pieces.micro_batch = 32;
  EXPECT_LT(optim::memory_estimate(*meta, {128, 1, 28, 28}, pieces).activations, e.activations);

  const int64_t cap = optim::memory_estimate(*meta, {1000, 1, 28, 28}).step_peak_bytes;
  const int64_t fits = optim::max_batch_that_fits(*meta, {1, 1, 28, 28}, static_cast<std::size_t>(cap));
  EXPECT_GE(fits, 1000);
  EXPECT_GT(optim::memory_estimate(*meta, {fits + 1, 1, 28, 28}).step_peak_bytes, cap);
}

TEST(MemoryEstimate, ExamplesPrintTheEstimateAndExitBeforeLoadingData) {
  const auto t0 = std::chrono::steady_clock::now();
  auto [out, rc] = test::run(std::string(EMBER_CNN_BIN) + " --device " + test::test_device().str() +
                             " --data /nonexistent --estimate-memory --device-memory 64MiB --batch-size 256 --json 2>&1");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("estimated step peak"), std::string::npos) << out;
  const nlohmann::json j = nlohmann::json::parse(test::last_line(out));
  EXPECT_GT(j.at("estimated_step_peak_bytes").get<int64_t>(), 0);
  EXPECT_GT(j.at("max_batch_that_fits").get<int64_t>(), 0);
  EXPECT_GT(j.at("modules").size(), 5u);
  EXPECT_LT(secs, 5.0) << "the whole program, start to exit";  // ~0.1 s alone; CI machines are shared
}

TEST(MemoryEstimate, ModelNotOnMetaIsAnError) {
  auto real = examples::make_mlp();
  EXPECT_THROW(optim::memory_estimate(*real, {8, 1, 28, 28}), Error);
}

}  // namespace
}  // namespace ember
