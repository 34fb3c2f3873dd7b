// Note [Atomic file writes] (core/atomic_file.cpp): the file a path names is written
// (symlinks and chains of them followed), its mode and owner kept; what is not a regular
// file is refused; a writer that fails or is abandoned leaves nothing; temporaries of dead
// writers are removed by the next write; the named-temporary fallback behaves the same.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <filesystem>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/atomic_file.h"
#include "tests/core/temp_dir.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

class AtomicFileTest : public test::TempDirTest {
 protected:
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  // The message of the ember::Error that `f` throws ("" when it throws none).
  template <class F>
  static std::string error_of(F&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  // A pid that no process has any more: a child that has exited and been reaped.
  static pid_t dead_pid() {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(0);
    ::waitpid(pid, nullptr, 0);
    return pid;
  }
  // As atomic_file.cpp names this host in temporaries.
  static std::string host_tag() {
    char buf[HOST_NAME_MAX + 1] = {};
    ::gethostname(buf, sizeof buf - 1);
    std::string h(buf);
    for (char& c : h)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') c = '-';
    return h.substr(0, 64);
  }
};

TEST_F(AtomicFileTest, WritesANewFileAndLeavesNothingElse) {
  write_file_atomically(path("a.bin"), "new", "test");
  EXPECT_EQ(read(path("a.bin")), "new");
  EXPECT_EQ(entries(), std::vector<std::string>{"a.bin"});
}

TEST_F(AtomicFileTest, ASymlinkChainUpdatesItsTargetAndStaysALink) {
  fs::create_directory(dir_ / "real");
  write(path("real/target.bin"), "old");
  fs::create_symlink("real/target.bin", dir_ / "hop");         // relative to the link's folder
  fs::create_symlink((dir_ / "hop").string(), dir_ / "ck.bin");  // absolute, to another link
  write_file_atomically(path("ck.bin"), "new", "test");
  EXPECT_TRUE(fs::is_symlink(dir_ / "ck.bin"));
  EXPECT_TRUE(fs::is_symlink(dir_ / "hop"));
  EXPECT_EQ(read(path("real/target.bin")), "new");
  EXPECT_EQ(entries(), (std::vector<std::string>{"ck.bin", "hop", "real"}));
  EXPECT_EQ(fs::directory_iterator(dir_ / "real")->path().filename(), "target.bin");  // no temporary left there
}

TEST_F(AtomicFileTest, ADanglingSymlinkCreatesItsTarget) {
  fs::create_symlink("later.bin", dir_ / "link.bin");
  write_file_atomically(path("link.bin"), "new", "test");
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.bin"));
  EXPECT_EQ(read(path("later.bin")), "new");
}

TEST_F(AtomicFileTest, ASymlinkLoopIsAClearError) {
  fs::create_symlink("b", dir_ / "a");
  fs::create_symlink("a", dir_ / "b");
  const std::string e = error_of([&] { write_file_atomically(path("a"), "x", "--save"); });
  EXPECT_TRUE(has(e, "--save: cannot write '" + path("a") + "': its symbolic links loop")) << e;
}

TEST_F(AtomicFileTest, KeepsTheModeOfTheFileItReplaces) {
  write(path("m.bin"), "old");
  ::chmod(path("m.bin").c_str(), 0600);
  write_file_atomically(path("m.bin"), "new", "test");
  struct stat st{};
  ASSERT_EQ(::stat(path("m.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ::chmod(path("m.bin").c_str(), 0640);
  write_file_atomically(path("m.bin"), "newer", "test");
  ASSERT_EQ(::stat(path("m.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(read(path("m.bin")), "newer");
}

TEST_F(AtomicFileTest, KeepsTheOwnerOfTheFileItReplaces) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a file to another owner needs root";
  write(path("o.bin"), "old");
  ASSERT_EQ(::chown(path("o.bin").c_str(), 65534, 65534), 0);
  write_file_atomically(path("o.bin"), "new", "test");
  struct stat st{};
  ASSERT_EQ(::stat(path("o.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_EQ(st.st_gid, 65534u);
  EXPECT_EQ(read(path("o.bin")), "new");
}

TEST_F(AtomicFileTest, RefusesToReplaceWhatIsNotARegularFile) {
  fs::create_directory(dir_ / "folder");
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0644), 0);
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path("sock").c_str());
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  std::vector<std::pair<std::string, std::string>> cases = {
      {"folder", "a directory"}, {"fifo", "a FIFO (named pipe)"}, {"sock", "a socket"}};
  if (::geteuid() == 0 && ::mknod(path("null").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0)
    cases.emplace_back("null", "a character device");  // /dev/null's numbers: what --save /dev/null replaced
  fs::create_symlink("fifo", dir_ / "to-fifo");
  cases.emplace_back("to-fifo", "a FIFO (named pipe)");
  for (const auto& [name, kind] : cases) {
    const std::string e = error_of([&] { write_file_atomically(path(name), "x", "--save"); });
    EXPECT_TRUE(has(e, "--save: '" + path(name) + "'")) << e;
    EXPECT_TRUE(has(e, "is " + kind + ", not a regular file: refusing to replace it")) << e;
    EXPECT_TRUE(has(error_of([&] { check_can_write(path(name), "--save"); }), "refusing to replace it")) << name;
  }
  EXPECT_TRUE(has(error_of([&] { write_file_atomically(path("to-fifo"), "x", "t"); }), "(a link to '")) << "";
  ::close(sock);
  struct stat st{};
  ASSERT_EQ(::lstat(path("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_TRUE(fs::is_directory(dir_ / "folder"));
}

TEST_F(AtomicFileTest, AWriterDroppedBeforeCommitLeavesTheOldFileAndNothingElse) {
  write(path("c.bin"), "old");
  for (bool unnamed : {true, false}) {
    detail::set_unnamed_temp_files(unnamed);
    {
      AtomicFile f(path("c.bin"), "test");
      f.write(std::string(1 << 20, 'x'));
      EXPECT_EQ(entries().size(), unnamed ? 1u : 2u);  // the fallback's temporary has a name from the start
    }
    EXPECT_EQ(read(path("c.bin")), "old");
    EXPECT_EQ(entries(), std::vector<std::string>{"c.bin"});
  }
  detail::set_unnamed_temp_files(true);
}

TEST_F(AtomicFileTest, TheNamedTemporaryFallbackWritesTheSame) {
  detail::set_unnamed_temp_files(false);
  write(path("f.bin"), "old");
  ::chmod(path("f.bin").c_str(), 0600);
  fs::create_symlink("f.bin", dir_ / "link");
  write_file_atomically(path("link"), "new", "test");
  detail::set_unnamed_temp_files(true);
  EXPECT_EQ(read(path("f.bin")), "new");
  EXPECT_EQ(fs::status(dir_ / "f.bin").permissions(), fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(entries(), (std::vector<std::string>{"f.bin", "link"}));
}

// Step 4 of the Note: temporaries of writers that died before their rename, and the
// PATH.tmp.PID files of ember before it, go at the next write; a live writer's stay.
TEST_F(AtomicFileTest, TheNextWriteRemovesTheTemporariesOfDeadWriters) {
  const pid_t dead = dead_pid(), alive = ::getppid();
  const std::string host = host_tag();
  const std::vector<std::string> stale = {".ck.bin.ember-tmp." + host + "." + std::to_string(dead) + ".00ff00ff00ff00ff",
                                          ".other.bin.ember-tmp." + host + "." + std::to_string(dead) + ".0123",
                                          "ck.bin.tmp." + std::to_string(dead)};
  const std::vector<std::string> kept = {
      ".ck.bin.ember-tmp." + host + "." + std::to_string(alive) + ".1234",  // a live writer's
      ".ck.bin.ember-tmp.another-host." + std::to_string(dead) + ".1234",   // another host's
      "ck.bin.tmp.notapid", "other.bin.tmp." + std::to_string(dead)};       // not ember's, or another file's
  for (const auto& n : stale) write(path(n), "stale");
  for (const auto& n : kept) write(path(n), "kept");
  write_file_atomically(path("ck.bin"), "new", "test");
  std::vector<std::string> want = kept;
  want.push_back("ck.bin");
  std::sort(want.begin(), want.end());
  EXPECT_EQ(entries(), want);
}

TEST_F(AtomicFileTest, CheckCanWriteTouchesNothing) {
  write(path("k.bin"), "old");
  check_can_write(path("k.bin"), "--save");
  check_can_write(path("new.bin"), "--save");
  EXPECT_EQ(read(path("k.bin")), "old");
  EXPECT_EQ(entries(), std::vector<std::string>{"k.bin"});
  const std::string e = error_of([&] { check_can_write(path("missing/x.bin"), "--save"); });
  EXPECT_TRUE(has(e, "--save: cannot write '" + path("missing/x.bin") + "'")) << e;
  EXPECT_TRUE(has(e, "No such file or directory")) << e;
}

TEST_F(AtomicFileTest, ReadFileReadsRegularFilesOnly) {
  write(path("r.bin"), std::string("a\0b", 3));
  EXPECT_EQ(read_file(path("r.bin"), "test"), std::string("a\0b", 3));
  fs::create_symlink("r.bin", dir_ / "link");
  EXPECT_EQ(read_file(path("link"), "test"), std::string("a\0b", 3));
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0644), 0);  // opened without a writer: must not block
  EXPECT_TRUE(has(error_of([&] { read_file(path(""), "--resume"); }), "is a directory, not a file to read"));
  EXPECT_TRUE(has(error_of([&] { read_file(path("fifo"), "--resume"); }), "is a FIFO (named pipe)"));
  EXPECT_TRUE(has(error_of([&] { read_file(path("none"), "--resume"); }),
                  "--resume: cannot open '" + path("none") + "': No such file or directory"));
}

}  // namespace
}  // namespace ember
