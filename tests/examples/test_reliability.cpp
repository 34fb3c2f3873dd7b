// The reliability suite for checkpoints (docs/reliability.md): kill -9 and SIGTERM at
// random points of 100 saves, many inside the write, after which the file is the old or
// the new checkpoint, a run resumes from it and no temporary file remains; a save through
// a symlink updates its target and keeps its mode; what is not a regular file is refused;
// a flipped byte in any tensor, a checkpoint holding NaN and a tampered epoch are refused
// with clear errors; a run whose loss becomes NaN stops with an error.
//
// The examples run on a tiny Fashion-MNIST-shaped folder written here (tiny_data), so each
// run takes a fraction of a second.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "data/idx.h"
#include "ember.h"
#include "examples/common/models.h"
#include "optim/checkpoint.h"
#include "tests/core/temp_dir.h"
#include "tests/examples/run_util.h"

extern char** environ;

namespace ember {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A Fashion-MNIST-shaped folder: 256 training and 64 test images of noise, labels 0-9.
void write_tiny_data(const std::string& dir) {
  fs::create_directories(dir);
  Generator gen(5);
  for (const auto& [prefix, n] : {std::pair{"train", 256}, std::pair{"t10k", 64}}) {
    data::write_idx(dir + "/" + prefix + "-images-idx3-ubyte", randint(0, 256, {n, 28, 28}, kInt64, &gen).to(kUInt8));
    data::write_idx(dir + "/" + prefix + "-labels-idx1-ubyte", randint(0, 10, {n}, kInt64, &gen).to(kUInt8));
  }
}

// The worker: the MLP example's model and Adam, one step taken, saved as the example saves
// it (epoch 1, 2, ...) until it is killed; "begin K" and "done K MICROSECONDS" on stdout.
TEST(ReliabilityWorker, SavesUntilKilled) {
  const char* path = std::getenv("EMBER_TEST_CKPT");
  if (!path) GTEST_SKIP() << "started by KillDuringSaves";
  set_default_device(Device::cpu());
  auto model = examples::make_mlp();
  optim::Adam opt(model->parameters(), {});
  Tensor x = randn({8, 1, 28, 28});
  Tensor y = randint(0, 10, {8}, kInt64);
  nn::functional::cross_entropy((*model)(x), y).backward();
  opt.step();
  int64_t epoch = std::atoll(std::getenv("EMBER_TEST_FIRST_EPOCH"));
  for (;; ++epoch) {
    std::string line = "begin " + std::to_string(epoch) + "\n";
    (void)!::write(1, line.data(), line.size());
    const auto t0 = Clock::now();
    optim::save_checkpoint(path, *model, &opt, {{"model", "mlp"}, {"epoch", std::to_string(epoch)}});
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
    line = "done " + std::to_string(epoch) + " " + std::to_string(us) + "\n";
    (void)!::write(1, line.data(), line.size());
  }
}

class Reliability : public test::TempDirTest {
 protected:
  std::vector<std::string> entries(const fs::path& d) const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(d)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  // The example, with the tiny data set; stdout and stderr.
  std::pair<std::string, int> mlp(const std::string& args) {
    return test::run(std::string(EMBER_MLP_BIN) + " --device cpu --data " + path("data") + " --limit-test 32 " +
                     args + " 2>&1");
  }
  // The epoch a checkpoint records, loaded as --resume loads it (checksums, values).
  int64_t resume_epoch(const std::string& file) {
    auto model = examples::make_mlp();
    optim::Adam opt(model->parameters(), {});
    return optim::checkpoint_int(optim::load_checkpoint(file, *model, &opt), "epoch", file, 0, 1000000);
  }
};

// Note [Atomic file writes] under fire. Each of 100 workers saves the MLP's checkpoint (6.4
// MB with Adam's state) over and over; at a random save and a random instant in it the
// worker is stopped (SIGSTOP), its open files say whether it was inside the write, and it
// is sent SIGKILL (even runs) or SIGTERM (odd). Then the file must be the last complete
// checkpoint or the one being written, load as --resume loads it, and the only other files
// may be the temporary of the two system calls between naming and renaming, which the next
// worker's first save removes.
TEST_F(Reliability, KillDuringSaves) {
  const std::string ck = path("ck.safetensors");
  std::mt19937 rng(29);
  int inside_write = 0, window_left = 0;
  int64_t epoch = 1, in_file = 0;  // the next worker's first epoch; the epoch the file holds (0: none)
  std::vector<int64_t> save_us;
  for (int kill = 0; kill < 100; ++kill) {
    SCOPED_TRACE("kill " + std::to_string(kill));
    int out[2];
    ASSERT_EQ(::pipe(out), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    env.push_back("EMBER_TEST_CKPT=" + ck);
    env.push_back("EMBER_TEST_FIRST_EPOCH=" + std::to_string(epoch));
    env.push_back("EMBER_NUM_THREADS=1");
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string exe = "/proc/self/exe", filter = "--gtest_filter=ReliabilityWorker.SavesUntilKilled";
    char* argv[] = {exe.data(), filter.data(), nullptr};
    pid_t pid = -1;
    ASSERT_EQ(::posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv, envp.data()), 0);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    FILE* lines = ::fdopen(out[0], "r");

    // Read "begin"/"done" lines until the chosen save begins, then wait into it.
    const int64_t target = epoch + static_cast<int64_t>(rng() % 3);
    int64_t last_done = in_file, begun = 0;
    char buf[128];
    auto take = [&](const char* line) {
      long long k = 0, us = 0;
      if (std::sscanf(line, "done %lld %lld", &k, &us) == 2) {
        last_done = std::max<int64_t>(last_done, k);
        save_us.push_back(us);
      } else if (std::sscanf(line, "begin %lld", &k) == 1) {
        begun = std::max<int64_t>(begun, k);
      }
    };
    while (begun < target && std::fgets(buf, sizeof buf, lines)) take(buf);
    ASSERT_EQ(begun, target) << "the worker ended early";
    std::vector<int64_t> sorted = save_us;
    std::sort(sorted.begin(), sorted.end());
    const int64_t typical = sorted.empty() ? 20000 : sorted[sorted.size() / 2];
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % static_cast<uint64_t>(typical * 6 / 5 + 1)));
    ASSERT_EQ(::kill(pid, SIGSTOP), 0);
    // Inside the write: a file of the checkpoint's folder is open, unnamed or a temporary.
    for (const auto& fd : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
      std::error_code ec;
      const std::string target_of = fs::read_symlink(fd.path(), ec).string();
      if (!ec && target_of.rfind(dir_.string(), 0) == 0) {
        ++inside_write;
        break;
      }
    }
    // Everything it said before it stopped (the pipe holds what was not read yet).
    ::fcntl(out[0], F_SETFL, O_NONBLOCK);
    while (std::fgets(buf, sizeof buf, lines)) take(buf);
    ::kill(pid, kill % 2 == 0 ? SIGKILL : SIGTERM);
    ::kill(pid, SIGCONT);
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::fclose(lines);
    EXPECT_TRUE(WIFSIGNALED(status)) << "the worker was not killed";

    // The old or the new checkpoint, whole; nothing else but the link-rename window's temporary.
    const int64_t found = resume_epoch(ck);
    EXPECT_TRUE(found == last_done || (found == begun && begun > last_done))
        << "found epoch " << found << ", last complete " << last_done << ", last begun " << begun;
    in_file = found;
    for (const std::string& n : entries(dir_))
      if (n != "ck.safetensors") {
        EXPECT_TRUE(has(n, ".ck.safetensors.ember-tmp.")) << "left behind: " << n;
        ++window_left;
      }
    epoch = begun + 1;
  }
  // A last save (as the next run's) clears what any kill left.
  auto model = examples::make_mlp();
  optim::save_checkpoint(ck, *model, nullptr, {{"model", "mlp"}, {"epoch", "0"}});
  EXPECT_EQ(entries(dir_), std::vector<std::string>{"ck.safetensors"});
  EXPECT_GE(inside_write, 25) << "too few kills landed inside the write to show anything";
  RecordProperty("kills_inside_write", inside_write);
  RecordProperty("temporaries_left_by_the_link_rename_window", window_left);
  std::printf("100 kills: %d inside the write, %d left the link-rename window's temporary; median save %lld us\n",
              inside_write, window_left, static_cast<long long>(save_us.empty() ? 0 : save_us[save_us.size() / 2]));
}

// --resume works after the kills, in the example itself, and its --save replaces the file.
TEST_F(Reliability, TheExampleResumesAndSavesThroughASymlinkKeepingTheMode) {
  write_tiny_data(path("data"));
  fs::create_directories(dir_ / "real");
  auto [out, rc] = mlp("--epochs 1 --save " + path("real/ck.safetensors"));
  ASSERT_EQ(rc, 0) << out;
  ::chmod(path("real/ck.safetensors").c_str(), 0600);
  fs::create_symlink("real/ck.safetensors", dir_ / "link.safetensors");
  std::tie(out, rc) = mlp("--epochs 2 --resume " + path("link.safetensors") + " --save " + path("link.safetensors"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(has(out, "resumed from " + path("link.safetensors") + " after epoch 1")) << out;
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.safetensors"));
  EXPECT_EQ(resume_epoch(path("real/ck.safetensors")), 2);
  EXPECT_EQ(fs::status(dir_ / "real/ck.safetensors").permissions(), fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(entries(dir_ / "real"), std::vector<std::string>{"ck.safetensors"});
}

TEST_F(Reliability, WhatIsNotARegularFileIsNeverReplaced) {
  write_tiny_data(path("data"));
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0644), 0);
  std::vector<std::string> targets = {path("fifo"), path("data")};
  if (::geteuid() == 0 && ::mknod(path("null").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0)
    targets.push_back(path("null"));  // what --save /dev/null replaced, as root
  for (const std::string& t : targets) {
    auto [out, rc] = mlp("--save " + t);
    EXPECT_EQ(rc, 1) << out;
    EXPECT_TRUE(has(out, "ember_mlp: error: --save: '" + t + "' is ")) << out;
    EXPECT_TRUE(has(out, "not a regular file: refusing to replace it")) << out;
    EXPECT_FALSE(has(out, "epoch 1/")) << "it trained first: " << out;
  }
  struct stat st{};
  ASSERT_EQ(::lstat(path("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  if (targets.size() == 3) {
    ASSERT_EQ(::lstat(path("null").c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
  }
}

// A flipped byte in any tensor of the example's checkpoint: --resume names the tensor.
TEST_F(Reliability, AFlippedByteInAnyTensorIsRefused) {
  write_tiny_data(path("data"));
  const std::string ck = path("ck.safetensors");
  auto [out, rc] = mlp("--epochs 1 --save " + ck);
  ASSERT_EQ(rc, 0) << out;
  const std::string good = read(ck);
  const SafetensorsFile f = load_safetensors(ck);
  ASSERT_EQ(f.tensors.size(), 26u);  // 6 parameters, their 12 moments, lr, step, the group's indices and 5 options
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<unsigned char>(good[i]);
  // The tensors tile the data section in their order: flip the last byte of each.
  uint64_t end = 8 + header;
  for (const auto& [name, t] : f.tensors) {
    end += static_cast<uint64_t>(t.numel() * t.element_size());
    std::string bad = good;
    bad[end - 1] = static_cast<char>(bad[end - 1] ^ 0x01);
    write(ck, bad);
    std::tie(out, rc) = mlp("--epochs 2 --resume " + ck);
    EXPECT_EQ(rc, 1) << name << ": " << out;
    EXPECT_TRUE(has(out, "tensor '" + name + "' is damaged")) << name << ": " << out;
  }
}

// Values a checksum cannot vouch for: a checkpoint written with NaN in it, and epochs that
// are missing, not numbers, negative or huge (std::stoll ended the program before).
TEST_F(Reliability, NonFiniteStateAndBadEpochsAreRefused) {
  write_tiny_data(path("data"));
  const std::string ck = path("ck.safetensors");
  auto [out, rc] = mlp("--epochs 1 --save " + ck);
  ASSERT_EQ(rc, 0) << out;
  const SafetensorsFile f = load_safetensors(ck);
  auto rewrite = [&](const std::map<std::string, std::string>& meta, const std::string& nan_in) {
    std::vector<std::pair<std::string, Tensor>> ts = f.tensors;
    for (auto& [n, t] : ts)
      if (n == nan_in) t = full(t.shape(), std::numeric_limits<double>::quiet_NaN(), {t.dtype(), Device::cpu()});
    save_safetensors(ck, ts, meta);
  };
  rewrite(f.metadata, "optimizer.state.0.exp_avg");
  std::tie(out, rc) = mlp("--epochs 2 --resume " + ck);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(has(out, "tensor 'optimizer.state.0.exp_avg' holds nan at element 0")) << out;
  const std::vector<std::pair<std::string, std::string>> epochs = {
      {"", "has no 'epoch' in its metadata"}, {"abc", "its 'epoch' is 'abc', not a whole number"},
      {"99999999999999999999", "outside 0 to 1000000"}, {"-5", "its 'epoch' is -5, outside 0 to 1000000"}};
  for (const auto& [value, message] : epochs) {
    std::map<std::string, std::string> meta = f.metadata;
    if (value.empty()) meta.erase("epoch");
    else meta["epoch"] = value;
    rewrite(meta, "");
    std::tie(out, rc) = mlp("--epochs 2 --resume " + ck);
    EXPECT_EQ(rc, 1) << value << ": " << out;
    EXPECT_TRUE(has(out, message)) << value << ": " << out;
  }
}

// --lr at the top of its range with SGD: the loss becomes NaN or infinite, and the run stops
// with an error instead of training on and exiting 0; its checkpoint is not overwritten.
TEST_F(Reliability, ATrainingThatDivergesStops) {
  write_tiny_data(path("data"));
  auto [out, rc] = mlp("--optimizer sgd --lr 1000 --batch-size 8 --epochs 3 --save " + path("ck.safetensors"));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(has(out, "ember_mlp: error: training diverged: the mean loss of epoch 1 is ")) << out;
  EXPECT_TRUE(has(out, "(--lr 1000 with sgd;")) << out;
  EXPECT_FALSE(fs::exists(path("ck.safetensors")));
}

// Note [OOM verdict] in the example: --max-memory 1B is the cap's verdict (not
// fragmentation), explained, in the flags a user types, with the batch from the estimate
// (none fits); and under a cap where one does, following the advice does not give the
// same advice again.
TEST_F(Reliability, ACapTooSmallIsTheCapInTheExamplesWords) {
  write_tiny_data(path("data"));
  const std::string cnn = std::string(EMBER_CNN_BIN) + " --device cpu --data " + path("data") + " --max-memory ";
  const auto [out, rc] = test::run(cnn + "1B 2>&1");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_TRUE(has(out, "verdict: the cap\n")) << out;
  EXPECT_TRUE(has(out, "(set by --max-memory 1B on top of the ")) << out;
  EXPECT_TRUE(has(out, "held when training started)")) << out;
  EXPECT_TRUE(has(out, "Raise the cap (--max-memory)")) << out;
  EXPECT_TRUE(has(out, "--checkpoint")) << out;
  EXPECT_TRUE(has(out, "By the memory estimate (--estimate-memory) not even a batch of 1 fits under the cap")) << out;
  for (const char* not_there : {"max_split_size_mb", "nn::", "optim::", "fragmentation"})
    EXPECT_FALSE(has(out, not_there)) << not_there << " in: " << out;
  // Under 12 MiB the estimate names a batch; run with it, the step fits, or the report
  // does not give the same batch again.
  const auto [capped, rc1] = test::run(cnn + "12MiB --batch-size 256 2>&1");
  ASSERT_EQ(rc1, 1) << capped;
  const auto at = capped.find("(--batch-size ");
  ASSERT_NE(at, std::string::npos) << capped;
  const std::string batch = capped.substr(at + 14, capped.find(')', at) - at - 14);
  const auto [again, rc2] = test::run(cnn + "12MiB --batch-size " + batch + " 2>&1");
  if (rc2 != 0) EXPECT_FALSE(has(again, "(--batch-size " + batch + ")")) << "the same advice again:\n" << again;
}

}  // namespace
}  // namespace ember
