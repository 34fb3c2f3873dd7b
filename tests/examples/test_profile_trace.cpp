// --profile-trace: a training example's run writes a Chrome/Perfetto trace of its training
// (core/profiler_trace.h) beside --profile's table, on the CPU and on a CUDA device (in CI
// the emulated one, whose trace also has the kernels on their stream); ember_gpt takes the
// flag too.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "core/device.h"
#include "tests/core/temp_dir.h"
#include "tests/examples/run_util.h"

namespace ember {
namespace {

using nlohmann::json;
using test::run;

const char* const kData = "/usr/share/datasets/fashion-mnist";

// The categories of the trace's complete events, and whether one of them is named `name`.
struct Seen {
  std::set<std::string> cats, names;
};
Seen seen(const std::string& file) {
  std::ifstream in(file);
  const json trace = json::parse(in);
  Seen s;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == "X") {
      s.cats.insert(e.at("cat").get<std::string>());
      s.names.insert(e.at("name").get<std::string>());
    }
  return s;
}

class ProfileTrace : public test::TempDirTest {
 protected:
  // ember_mlp for 4 steps with --profile and --profile-trace; the trace's contents.
  Seen train_mlp(const std::string& device) {
    const std::string file = path("mlp.trace.json");
    auto [out, rc] = run(std::string(EMBER_MLP_BIN) + " --device " + device +
                         " --limit-train 256 --batch-size 64 --limit-test 64 --threads 1 --profile --profile-trace " +
                         file + " --json 2>&1");
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("| op | calls |"), std::string::npos) << "--profile's table: " << out;
    EXPECT_NE(out.find("trace of training written to " + file), std::string::npos) << out;
    EXPECT_NO_THROW((void)json::parse(test::last_line(out))) << "--json's line stays last: " << out;
    EXPECT_TRUE(std::filesystem::is_regular_file(file));
    return rc == 0 ? seen(file) : Seen{};
  }
};

TEST_F(ProfileTrace, MlpOnTheCpu) {
  if (!std::filesystem::exists(kData)) GTEST_SKIP() << "no Fashion-MNIST in " << kData;
  const Seen s = train_mlp("cpu");
  EXPECT_TRUE(s.cats.contains("op"));
  EXPECT_FALSE(s.cats.contains("gpu_op"));
  for (const char* op : {"linear", "cross_entropy", "cross_entropy_backward", "multi_adam_update"})
    EXPECT_TRUE(s.names.contains(op)) << op;
}

TEST_F(ProfileTrace, MlpOnCuda) {
  if (!std::filesystem::exists(kData)) GTEST_SKIP() << "no Fashion-MNIST in " << kData;
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device (EMBER_CUDA=EMULATED gives one)";
  const Seen s = train_mlp("cuda");
  EXPECT_TRUE(s.cats.contains("op"));
  EXPECT_TRUE(s.cats.contains("gpu_op"));
#if defined(EMBER_TEST_EMULATED_CUDA)
  EXPECT_TRUE(s.cats.contains("kernel"));
#endif
}

TEST_F(ProfileTrace, GptTakesTheFlag) {
  const std::string text = path("text.txt"), file = path("gpt.trace.json");
  std::string words;
  for (int i = 0; i < 400; ++i) words += i % 7 == 0 ? "and the lord said\n" : "unto moses, it was good. ";
  write(text, words);
  auto [out, rc] = run(std::string(EMBER_GPT_BIN) + " --device cpu --data " + text +
                       " --block-size 16 --n-layer 1 --n-head 2 --n-embd 16 --batch-size 4 --eval-iters 1 --iters 3 "
                       "--eval-interval 3 --threads 1 --profile-trace " + file + " 2>&1");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("| op | calls |"), std::string::npos) << "the table needs --profile: " << out;
  const Seen s = seen(file);
  EXPECT_TRUE(s.names.contains("linear") || s.names.contains("matmul")) << out;
}

TEST_F(ProfileTrace, AnUnwritablePathFailsBeforeTraining) {
  std::filesystem::create_directory(path("folder"));
  auto [out, rc] = run(std::string(EMBER_MLP_BIN) + " --device cpu --data " + path("no-dataset") +
                       " --profile-trace " + path("folder") + " 2>&1");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("--profile-trace"), std::string::npos) << out;
}

}  // namespace
}  // namespace ember
