// The CNN example's --image-size: the images are resized as they are loaded, the network's
// first linear layer follows the size, and smaller images train in less memory.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/examples/run_util.h"

namespace ember {
namespace {

const char* const kData = "/usr/share/datasets/fashion-mnist";

nlohmann::json train_cnn(int64_t image_size) {
  auto [out, rc] = test::run(std::string(EMBER_CNN_BIN) + " --device cpu --threads 1 --limit-train 1024 --limit-test 256" +
                             " --batch-size 64 --image-size " + std::to_string(image_size) + " --json 2>&1");
  EXPECT_EQ(rc, 0) << out;
  return rc == 0 ? nlohmann::json::parse(test::last_line(out)) : nlohmann::json{};
}

TEST(ImageSize, SmallerImagesTrainInLessMemory) {
  if (!std::filesystem::exists(kData)) GTEST_SKIP() << "no Fashion-MNIST in " << kData;
  int64_t last_peak = 0;
  for (int64_t size : {14, 20, 28}) {  // 14 and 20 leave 3x3 and 5x5 maps after the pools, 28 7x7
    const nlohmann::json j = train_cnn(size);
    ASSERT_FALSE(j.is_null());
    EXPECT_EQ(j["image_size"], size);
    // Chance is 10%, give or take 2 points over 256 test images; 16 steps reach 40% and more.
    EXPECT_GT(j["test_accuracy"].get<double>(), 0.25) << "size " << size;
    const int64_t peak = j["step_peak_bytes"].get<int64_t>();  // the training steps, not the datasets
    EXPECT_GT(peak, last_peak) << "size " << size;
    last_peak = peak;
  }
}

TEST(ImageSize, OutOfRangeIsAClearError) {
  auto [out, rc] = test::run(std::string(EMBER_CNN_BIN) + " --image-size 3 2>&1");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--image-size"), std::string::npos) << out;
}

}  // namespace
}  // namespace ember
