// Flags the training driver acts on before it reads the data set (absent here, so each
// run stops at loading it): --tf32 reaches the runtime switch.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "examples/common/train.h"
#include "tests/core/temp_dir.h"

namespace ember {
namespace {

class TrainFlags : public test::TempDirTest {
 protected:
  // Parses `args` as an example's command line would be.
  examples::TrainConfig parse(std::vector<std::string> args) {
    CLI::App app;
    examples::TrainConfig c;
    examples::add_train_flags(app, c);
    args.insert(args.begin(), "ember_test");
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    app.parse(static_cast<int>(argv.size()), argv.data());
    return c;
  }

  // train_main's exit code and what it printed on stderr; it fails at the missing data.
  std::pair<int, std::string> train(examples::TrainConfig c) {
    c.data = path("no-dataset");
    c.device = "cpu";
    testing::internal::CaptureStderr();
    const int rc = examples::train_main("mlp", c, []() -> std::shared_ptr<nn::Module> { return nullptr; });
    return {rc, testing::internal::GetCapturedStderr()};
  }
};

TEST_F(TrainFlags, Tf32ReachesTheRuntimeSwitch) {
  struct Restore {  // process-wide: put back however the test ends
    ~Restore() { set_allow_tf32(false); }
  } restore;
  ASSERT_FALSE(allow_tf32());
  EXPECT_FALSE(parse({}).tf32);
  train(parse({}));
  EXPECT_FALSE(allow_tf32()) << "allowed without --tf32";
  auto [rc, err] = train(parse({"--tf32"}));
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("no-dataset"), std::string::npos) << err;
  EXPECT_TRUE(allow_tf32());
}

}  // namespace
}  // namespace ember
