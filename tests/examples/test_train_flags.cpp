// Flags the training driver acts on before it reads the data set (absent here, so each
// run that gets that far stops there): --tf32 reaches the runtime switch, and a missing
// --resume file is an error except in a job that restarts and writes it itself.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "examples/common/train.h"
#include "tests/core/temp_dir.h"

namespace ember {
namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Sets an environment variable for the scope (the launcher's, read by train_main).
struct ScopedEnv {
  std::string name;
  ScopedEnv(std::string n, const std::string& value) : name(std::move(n)) { ::setenv(name.c_str(), value.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(name.c_str()); }
};

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

  struct Run {
    int rc;
    std::string out, err;
    bool reached_the_data() const { return rc == 1 && has(err, "no-dataset"); }
  };
  Run train(examples::TrainConfig c) {
    c.data = path("no-dataset");
    c.device = "cpu";
    testing::internal::CaptureStdout();
    testing::internal::CaptureStderr();
    const int rc = examples::train_main("mlp", c, []() -> std::shared_ptr<nn::Module> { return nullptr; });
    std::string out = testing::internal::GetCapturedStdout();
    return {rc, out, testing::internal::GetCapturedStderr()};
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
  const Run r = train(parse({"--tf32"}));
  EXPECT_TRUE(r.reached_the_data()) << r.err;
  EXPECT_TRUE(allow_tf32());
}

// Note [Resuming after a restart] (examples/common/restart.h).
TEST_F(TrainFlags, MissingResumeFileIsAnErrorOutsideARestartableJob) {
  examples::TrainConfig c;
  c.resume = path("ck.safetensors");
  Run r = train(c);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(has(r.err, "--resume: '" + c.resume + "' does not exist")) << r.err;
  c.save = c.resume;  // its own checkpoint, but no launcher restarts the job
  r = train(c);
  EXPECT_TRUE(has(r.err, "--resume: '" + c.resume + "' does not exist")) << r.err;
  ScopedEnv restarts("EMBER_MAX_RESTARTS", "0");
  r = train(c);
  EXPECT_TRUE(has(r.err, "--resume: '" + c.resume + "' does not exist")) << r.err;
}

TEST_F(TrainFlags, MissingResumeFileStartsFromTheBeginningInARestartableJobThatWritesIt) {
  for (const char* launcher : {"EMBER_MAX_RESTARTS", "TORCHELASTIC_MAX_RESTARTS"}) {  // ember-run's, torchrun's
    SCOPED_TRACE(launcher);
    ScopedEnv restarts(launcher, "1");
    examples::TrainConfig c;
    c.resume = path("ck.safetensors");
    c.save = path("other.safetensors");  // a typo in one of them: not this job's checkpoint
    Run r = train(c);
    EXPECT_TRUE(has(r.err, "--resume: '" + c.resume + "' does not exist")) << r.err;

    c.save = path("") + "/./ck.safetensors";  // the same file, spelt otherwise
    r = train(c);
    EXPECT_TRUE(r.reached_the_data()) << r.err;
    EXPECT_TRUE(has(r.out, "--resume: " + c.resume + " is not written yet: training from the start")) << r.out;
    ScopedEnv restart("EMBER_RESTART_COUNT", "1");  // a failure in the first epoch
    r = train(c);
    EXPECT_TRUE(r.reached_the_data()) << r.err;
    EXPECT_TRUE(has(r.out, "restart 1: " + c.resume + " was not written before the failure")) << r.out;
  }
}

}  // namespace
}  // namespace ember
