// ember_gpt (examples/gpt) on a small model and a small text: training lowers the loss,
// --resume continues bit for bit, sampling with the KV cache draws the tokens full
// recomputation draws, --estimate-memory is within 5% of the measured step peak, the
// emulated CUDA device trains as the CPU does, two processes under ember-run as one, an
// out-of-memory report at a long context names the attention and the context that fits,
// and bad flags are clear errors. Each run takes a second or two.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/device.h"
#include "tests/comm/process_util.h"
#include "tests/core/temp_dir.h"
#include "tests/examples/run_util.h"

namespace ember {
namespace {

using test::run;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

class Gpt : public test::TempDirTest {
 protected:
  void SetUp() override {
    test::TempDirTest::SetUp();
    // A text with structure to learn: sentences from a few words, in a fixed pseudo-random order.
    const char* words[] = {"the ", "lord ", "said ", "unto ", "moses, ", "and ", "it ", "was ", "good. ", "\n"};
    std::string text;
    uint32_t s = 12345;
    while (text.size() < 20000) {
      s = s * 1103515245u + 12345u;
      text += words[(s >> 16) % 10];
    }
    data_ = path("text.txt");
    write(data_, text);
  }
  // A 2-layer model of width 32 on a context of 16: about a second for 40 iterations.
  std::string cmd(const std::string& flags) const {
    const std::string block = flags.find("--block-size") == std::string::npos ? " --block-size 16" : "";
    return std::string(EMBER_GPT_BIN) + " --data " + data_ + block +
           " --n-layer 2 --n-head 2 --n-embd 32 --batch-size 8 --eval-iters 4 --warmup-iters 5 --lr 3e-3 --threads 1 "
           "--json " +
           flags + " 2>&1";
  }
  nlohmann::json train(const std::string& flags) const {
    auto [out, rc] = run(cmd(flags));
    EXPECT_EQ(rc, 0) << out;
    return rc == 0 ? nlohmann::json::parse(test::last_line(out)) : nlohmann::json::object();
  }
  std::string data_;
};

TEST_F(Gpt, TrainingLowersTheLoss) {
  const nlohmann::json j = train("--device cpu --iters 60 --eval-interval 30");
  ASSERT_FALSE(j.empty());
  const auto& evals = j["evals"];
  ASSERT_EQ(evals.size(), 3u);
  // At the start every character is about as likely: the loss is near log(vocabulary).
  const double vocab = j["vocab_size"].get<double>();
  EXPECT_NEAR(evals[0]["val_loss"].get<double>(), std::log(vocab), 0.3);
  EXPECT_LT(j["val_loss"].get<double>(), evals[0]["val_loss"].get<double>() - 0.8) << j.dump();
  EXPECT_EQ(j["steps"], 60);
  EXPECT_EQ(j["device"], "cpu");
}

// Training 40 iterations, or 20 then 20 more from the checkpoint, ends with the same
// weights: the losses and the sampled text are equal, not close. (The first 20 follow the
// 40 iterations' schedule: --lr-decay-iters 40.)
TEST_F(Gpt, ResumeContinuesBitForBit) {
  const std::string once = "--device cpu --eval-interval 20 --lr-decay-iters 40 --sample 40 --iters 40";
  const nlohmann::json a = train(once);
  const nlohmann::json b =
      train("--device cpu --eval-interval 20 --lr-decay-iters 40 --iters 20 --save " + path("b.safetensors"));
  const nlohmann::json c = train(once + " --resume " + path("b.safetensors"));
  ASSERT_FALSE(a.empty() || b.empty() || c.empty());
  EXPECT_EQ(c["steps"], 20);
  EXPECT_EQ(a["val_loss"].get<double>(), c["val_loss"].get<double>());
  EXPECT_EQ(a["train_loss"].get<double>(), c["train_loss"].get<double>());
  EXPECT_EQ(a["sample"], c["sample"]);
}

TEST_F(Gpt, ResumeRefusesAnotherText) {
  train("--device cpu --iters 2 --eval-interval 1 --save " + path("c.safetensors"));
  // As many characters, one of them another: the checkpoint's shapes fit, its vocabulary does not.
  std::string other = read(data_);
  std::replace(other.begin(), other.end(), 'a', 'A');
  write(path("other.txt"), other);
  auto [out, rc] = run(std::string(EMBER_GPT_BIN) + " --device cpu --data " + path("other.txt") +
                       " --n-layer 2 --n-head 2 --n-embd 32 --block-size 16 --resume " + path("c.safetensors") + " 2>&1");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(has(out, "another vocabulary")) << out;
}

// Past the context of 16 the window slides: the cached path must run it again as the
// recomputing path does, so 60 characters exercise both parts.
TEST_F(Gpt, KvCacheSamplesWhatRecomputationSamples) {
  const std::string flags = "--device cpu --iters 30 --eval-interval 30 --sample 60 --prompt 'and the'";
  const nlohmann::json cached = train(flags), full = train(flags + " --no-kv-cache");
  ASSERT_FALSE(cached.empty() || full.empty());
  EXPECT_EQ(cached["sample"].get<std::string>().substr(0, 7), "and the");
  EXPECT_EQ(cached["sample"].get<std::string>().size(), 67u);
  EXPECT_EQ(cached["sample"], full["sample"]);
  // Greedy decoding too (top-k 1): the likeliest token at every step.
  const nlohmann::json g1 = train(flags + " --top-k 1"), g2 = train(flags + " --top-k 1 --no-kv-cache");
  EXPECT_EQ(g1["sample"], g2["sample"]);
}

// On the CUDA device a context past 128 characters takes the split-KV decode kernel for
// each sampled token (kernels/cuda/attention_decode.cuh); recomputing the whole context
// takes the forward kernels: the same text either way. An untrained model of batch 1
// (the emulator runs a forward of 160 positions in seconds).
TEST_F(Gpt, KvCacheOnTheEmulatedCudaDevice) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device (EMBER_CUDA=EMULATED gives one)";
  std::string prompt;
  for (int i = 0; i < 8; ++i) prompt += "and it was good. ";  // 136 characters: decode from the first sample on
  const std::string flags = std::string(EMBER_GPT_BIN) + " --data " + data_ +
                            " --device cuda --n-layer 2 --n-head 2 --n-embd 32 --block-size 160 --batch-size 1 "
                            "--iters 0 --eval-iters 1 --sample 8 --top-k 1 --json --prompt '" + prompt + "'";
  std::vector<nlohmann::json> runs;
  for (const char* extra : {"", " --no-kv-cache"}) {
    auto [out, rc] = run(flags + extra + " 2>&1");
    ASSERT_EQ(rc, 0) << out;
    runs.push_back(nlohmann::json::parse(test::last_line(out)));
  }
  EXPECT_EQ(runs[0]["sample"].get<std::string>().size(), prompt.size() + 8);
  EXPECT_EQ(runs[0]["sample"], runs[1]["sample"]);
}

// The estimate (a dry run on the meta device, fused attention included) against the
// allocator's peak over a run's steps, beyond what it held before the model.
TEST_F(Gpt, EstimateMemoryIsWithinFivePercentOfTheStepPeak) {
  for (const char* extra : {"", " --checkpoint", " --precision bf16"}) {
    const std::string flags =
        std::string("--device cpu --iters 3 --eval-interval 100 --block-size 64") + extra;
    const nlohmann::json est = train(flags + " --estimate-memory");
    const nlohmann::json real = train(flags);
    ASSERT_FALSE(est.empty() || real.empty());
    const double e = est["estimated_step_peak_bytes"].get<double>(), m = real["step_peak_bytes"].get<double>();
    EXPECT_NEAR(e, m, 0.05 * m) << "flags" << extra << ": estimated " << e << ", measured " << m;
  }
}

// Note [Comparing the CPU's and the CUDA device's training] (test_train_devices.cpp): the
// same float32 steps summed in another order; over 20 Adam steps the losses agree to far
// better than the 1e-2 a wrong gradient moves them.
TEST_F(Gpt, EmulatedCudaTrainsAsTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device (EMBER_CUDA=EMULATED gives one)";
  const std::string flags = " --iters 20 --eval-interval 20";
  const nlohmann::json cpu = train("--device cpu" + flags), cuda = train("--device cuda" + flags);
  ASSERT_FALSE(cpu.empty() || cuda.empty());
  EXPECT_EQ(cuda["device"], "cuda:0");
  EXPECT_NEAR(cuda["val_loss"].get<double>(), cpu["val_loss"].get<double>(), 1e-3 * cpu["val_loss"].get<double>());
}

// Each process takes its half of every batch and DDP averages the gradients: the same
// update as one process's, to rounding (3e-8 measured), with ZeRO's shards too. --zero 2
// keeps no whole gradient to clip: it runs with --grad-clip 0, beside one process's run so.
TEST_F(Gpt, TwoProcessesTrainAsOne) {
  const std::string flags = "--device cpu --iters 20 --eval-interval 20";
  for (const std::string extra : {"", " --grad-clip 0"}) {
    const nlohmann::json one = train(flags + extra);
    for (const std::string& zero : extra.empty() ? std::vector<std::string>{"", " --zero 1"}
                                                : std::vector<std::string>{" --zero 2"}) {
      auto [out, rc] = run(std::string(EMBER_RUN_BIN) + " --nproc-per-node 2 --master-port " +
                           std::to_string(comm::free_port()) + " " + cmd(flags + extra + zero));
      ASSERT_EQ(rc, 0) << out;
      const std::string line = test::last_line(out);
      ASSERT_EQ(line.rfind("[rank 0] ", 0), 0u) << out;
      const nlohmann::json two = nlohmann::json::parse(line.substr(9));
      EXPECT_EQ(two["world_size"], 2);
      EXPECT_NEAR(two["val_loss"].get<double>(), one["val_loss"].get<double>(), 1e-5 * one["val_loss"].get<double>())
          << extra << zero;
    }
  }
}

// At a long context the math path's B*H*T^2 probabilities are what runs out: the report
// names the attention and the --block-size that fits under the cap on each path (by the
// memory estimate's reserved peak; the fused path's longer, its memory being linear), and
// runs at the contexts it names fit. On the fused path a cap below even its linear
// footprint names a shorter context that fits too.
TEST_F(Gpt, OomAtALongContextNamesTheAttention) {
  const std::string base = "--device cpu --iters 2 --eval-interval 100 --max-memory ";
  // The number after `pattern` in `out`, 0 when absent.
  auto after = [](const std::string& out, const std::string& pattern) {
    const size_t at = out.find(pattern);
    return at == std::string::npos ? 0 : std::atoi(out.c_str() + at + pattern.size());
  };
  auto fits = [&](const std::string& env, const std::string& cap, int block) {
    auto [out, rc] = run(env + cmd(base + cap + " --block-size " + std::to_string(block)));
    EXPECT_EQ(rc, 0) << env << "--block-size " << block << " under " << cap << ": " << out;
  };
  {
    auto [out, rc] = run("EMBER_ATTENTION=math " + cmd(base + "48MiB --block-size 512"));
    EXPECT_EQ(rc, 1) << out;
    EXPECT_TRUE(has(out, "out of memory")) << out;
    EXPECT_TRUE(has(out, "attention: the math path ran")) << out;
    EXPECT_TRUE(has(out, "the attention's scores and probabilities are most of it")) << out;
    const int math = after(out, "the math path fits --block-size ");
    const int fused = has(out, "the fused path fits --block-size 512 as it is")
                          ? 512
                          : after(out, "the fused path fits --block-size ");
    EXPECT_GT(math, 16) << out;
    EXPECT_LT(math, 512) << out;
    EXPECT_GT(fused, math) << out;
    fits("EMBER_ATTENTION=math ", "48MiB", math);
    fits("", "48MiB", fused);
  }
  {
    auto [out, rc] = run(cmd(base + "6MiB --block-size 512"));
    EXPECT_EQ(rc, 1) << out;
    EXPECT_TRUE(has(out, "attention: the fused path ran")) << out;
    EXPECT_TRUE(has(out, "linearly with the context")) << out;
    const int block = after(out, "at --batch-size 8, --block-size ");
    EXPECT_GT(block, 16) << out;
    EXPECT_LT(block, 512) << out;
    fits("", "6MiB", block);
  }
}

TEST_F(Gpt, BadFlagsAreClearErrors) {
  struct Case {
    std::string flags, message;
    int rc;
  };
  const Case cases[] = {
      {"--n-embd 30 --n-head 4", "--n-embd 30 must be a multiple of --n-head 4", 1},
      {"--dropout 1.5", "--dropout", 105},
      {"--preset tpu", "--preset", 105},
      {"--data " + path("missing.txt"), "--data: cannot read " + path("missing.txt"), 1},
      {"--zero 1", "--zero 1 needs several processes", 1},
      {"--cuda-graph", "--cuda-graph: needs --device cuda", 1},
      {"--prompt '\t' --sample 3 --iters 0", "is not in the text's vocabulary", 1},
  };
  for (const Case& c : cases) {
    const std::string data = has(c.flags, "--data") ? "" : " --data " + data_;
    auto [out, rc] = run(std::string(EMBER_GPT_BIN) + " --device cpu --json" + data + " " + c.flags + " 2>&1");
    EXPECT_EQ(rc, c.rc) << c.flags << ": " << out;
    EXPECT_TRUE(has(out, c.message)) << c.flags << ": " << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << c.flags << ": one line, got " << out;
  }
}

}  // namespace
}  // namespace ember
