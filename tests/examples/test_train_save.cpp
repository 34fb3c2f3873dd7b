// --save is checked before training starts: an unwritable checkpoint path fails at once
// with an error naming it and the OS's reason, instead of after the first epoch.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "core/atomic_file.h"
#include "examples/common/train.h"
#include "tests/core/temp_dir.h"

namespace ember {
namespace {

class SaveCheck : public test::TempDirTest {};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST_F(SaveCheck, WritableDirectoryPassesAndLeavesNothingBehind) {
  const std::string target = path("ckpt.safetensors");
  check_can_write(target, "--save");
  EXPECT_TRUE(std::filesystem::is_empty(path("")));
}

TEST_F(SaveCheck, ExistingFileIsNotTouched) {
  const std::string target = path("ckpt.safetensors");
  write(target, "old checkpoint");
  check_can_write(target, "--save");
  EXPECT_EQ(read(target), "old checkpoint");
}

TEST_F(SaveCheck, MissingDirectoryNamesPathAndOsError) {
  const std::string target = path("no/such/dir/ckpt.safetensors");
  try {
    check_can_write(target, "--save");
    FAIL() << "accepted " << target;
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "--save: cannot write '" + target + "'")) << e.what();
    EXPECT_TRUE(contains(e.what(), "No such file or directory")) << e.what();
  }
}

TEST_F(SaveCheck, DirectoryAsPathIsAnError) { EXPECT_THROW(check_can_write(path(""), "--save"), Error); }

TEST_F(SaveCheck, ReadOnlyDirectoryIsAnError) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into read-only directories";
  ::chmod(path("").c_str(), 0555);
  EXPECT_THROW(check_can_write(path("ckpt.safetensors"), "--save"), Error);
  ::chmod(path("").c_str(), 0755);
}

// train_main fails on the --save path before it reads the data set (which is absent here).
TEST_F(SaveCheck, TrainingFailsFastOnUnwritableSave) {
  examples::TrainConfig c;
  c.data = path("no-dataset");
  c.device = "cpu";
  c.save = path("missing/ckpt.safetensors");
  testing::internal::CaptureStderr();
  const int rc = examples::train_main("mlp", c, []() -> std::shared_ptr<nn::Module> {
    ADD_FAILURE() << "built a model despite an unwritable --save";
    return nullptr;
  });
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(contains(err, "--save: cannot write '" + c.save + "'")) << err;
}

}  // namespace
}  // namespace ember
