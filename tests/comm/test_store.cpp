// Stores: set/get/wait/add/compare_set on each implementation, timeouts that name the
// missing keys, TcpStore across threads and a port already in use.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <thread>

#include "base/error.h"
#include "comm/store.h"
#include "comm/tcp_store.h"

namespace ember::comm {
namespace {

using namespace std::chrono_literals;

const std::string kSecret = "test-secret-0123456789";
TcpStoreOptions opts(Duration timeout) { return {.secret = kSecret, .timeout = timeout}; }

void exercise(Store& s) {
  s.set("a", "hello");
  EXPECT_EQ(s.get("a"), "hello");
  s.set("bin", std::string("\0\x01\xff", 3));
  EXPECT_EQ(s.get("bin"), std::string("\0\x01\xff", 3));
  EXPECT_EQ(s.add("n", 2), 2);
  EXPECT_EQ(s.add("n", -5), -3);
  EXPECT_EQ(s.compare_set("c", "", "first"), "first");    // missing key matches ""
  EXPECT_EQ(s.compare_set("c", "wrong", "x"), "first");   // no change
  EXPECT_EQ(s.compare_set("c", "first", "second"), "second");
  EXPECT_EQ(s.check({"a", "nope"}), (std::vector<bool>{true, false}));
  s.wait({"a", "n"}, 100ms);
  try {
    s.wait({"a", "missing1", "missing2"}, 50ms);
    FAIL() << "no timeout";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("timed out after 50 ms"), std::string::npos) << m;
    EXPECT_NE(m.find("missing1"), std::string::npos) << m;
    EXPECT_NE(m.find("missing2"), std::string::npos) << m;
    EXPECT_EQ(m.find("'a'"), std::string::npos) << m;
  }
  s.set("text", "abc");
  EXPECT_THROW(s.add("text", 1), Error);
  // A waiter wakes when another thread sets the key.
  std::thread setter([&] {
    std::this_thread::sleep_for(20ms);
    s.set("late", "1");
  });
  s.wait({"late"}, 5s);
  setter.join();
}

TEST(Store, InProcess) {
  InProcessStore s;
  exercise(s);
}

TEST(Store, File) {
  const auto dir = std::filesystem::temp_directory_path() / ("ember_filestore_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  {
    FileStore s(dir.string());
    exercise(s);
    FileStore other(dir.string());  // a second rank on the same folder sees the keys
    EXPECT_EQ(other.get("a"), "hello");
  }
  std::filesystem::remove_all(dir);
}

// A process stopped while holding the folder's lock: add and compare_set end at the
// store's timeout with an error, not in a blocking flock.
TEST(Store, FileLockWaitEndsAtTheTimeout) {
  const auto dir = std::filesystem::temp_directory_path() / ("ember_filelock_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  FileStore s(dir.string());
  s.set_timeout(100ms);
  const int holder = ::open((dir / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_EQ(::flock(holder, LOCK_EX), 0);
  for (auto op : {std::function<void()>([&] { s.add("n", 1); }), std::function<void()>([&] {
                    s.compare_set("c", "", "x");
                  })}) {
    try {
      op();
      FAIL() << "took a held lock";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is still held after 100 ms"), std::string::npos) << e.what();
    }
  }
  ::close(holder);
  EXPECT_EQ(s.add("n", 1), 1);
  std::filesystem::remove_all(dir);
}

TEST(Store, Prefix) {
  auto base = std::make_shared<InProcessStore>();
  PrefixStore job1("job1/0", base), job2("job2/0", base);
  exercise(job1);
  EXPECT_EQ(job2.check({"a"}), std::vector<bool>{false});  // jobs do not see each other's keys
  EXPECT_EQ(base->get("job1/0/a"), "hello");
}

TEST(Store, TcpServedAndClients) {
  auto server = TcpStore::serve(0, opts(5s));
  ASSERT_GT(server->port(), 0);
  exercise(*server);
  auto client = TcpStore::connect("127.0.0.1", server->port(), opts(5s));
  EXPECT_EQ(client->get("a"), "hello");
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([port = server->port()] {
      auto c = TcpStore::connect("localhost", port, opts(5s));
      c->add("counter", 1);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(client->get("counter"), "4");
}

TEST(Store, TcpPortInUseIsClear) {
  auto server = TcpStore::serve(0, opts(5s));
  try {
    TcpStore::serve(server->port(), opts(1s));
    FAIL() << "second server on the same port";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("in use"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(server->port())), std::string::npos) << e.what();
  }
}

TEST(Store, TcpConnectTimesOutWithMessage) {
  int port;
  {
    auto s = TcpStore::serve(0, opts(1s));
    port = s->port();
  }  // closed: nobody listens there now
  try {
    TcpStore::connect("127.0.0.1", port, opts(100ms));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot connect"), std::string::npos) << e.what();
  }
}

TEST(Store, TcpClientSeesServerExit) {
  auto server = TcpStore::serve(0, opts(5s));
  auto client = TcpStore::connect("127.0.0.1", server->port(), opts(5s));
  server.reset();
  EXPECT_THROW(client->set("x", "y"), Error);
}

}  // namespace
}  // namespace ember::comm
