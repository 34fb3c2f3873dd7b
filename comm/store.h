// Store: the key-value rendezvous store that ranks meet through before they can talk.
//
// Every rank of a job sees the same keys. A value is a byte string. get() and wait()
// block until the keys exist, under a timeout, and a timeout is an ember::Error that
// names the operation, the keys still missing and the time waited: never a hang.
// Implementations: TcpStore (comm/tcp_store.h, served by rank 0), FileStore (a folder on
// a file system every rank shares), InProcessStore (ranks as threads of one process, for
// tests), and PrefixStore, which gives each job and each restart of a job its own keys.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ember::comm {

using Duration = std::chrono::milliseconds;
// The default for store waits and collectives (PyTorch uses 30 min; a stuck CPU job
// should say so sooner). EMBER_COMM_TIMEOUT_S overrides it where comm reads the environment.
inline constexpr Duration kDefaultTimeout = std::chrono::seconds(300);

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // The value of `key`, waiting up to timeout() for it to be set.
  virtual std::string get(const std::string& key);
  // Adds `delta` to the integer stored at `key` (0 when missing); returns the sum.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets `key` to `desired` when its value is `expected` (a missing key matches an empty
  // `expected`); returns the value the key holds afterwards.
  virtual std::string compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) = 0;
  // Whether each key exists now (no waiting).
  virtual std::vector<bool> check(const std::vector<std::string>& keys) = 0;
  // Waits until every key exists; throws ember::Error naming the missing keys after `timeout`.
  virtual void wait(const std::vector<std::string>& keys, Duration timeout);
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

  Duration timeout() const { return timeout_; }
  void set_timeout(Duration t) { timeout_ = t; }

 protected:
  // The value if the key exists now.
  virtual bool try_get(const std::string& key, std::string& value) = 0;
  // check() for wait(), whose deadline it may use to bound its own waiting (a store whose
  // keys are elsewhere: the TcpStore's answer must come by then).
  virtual std::vector<bool> check_until(const std::vector<std::string>& keys,
                                        std::chrono::steady_clock::time_point /*deadline*/) {
    return check(keys);
  }

 private:
  Duration timeout_ = kDefaultTimeout;
};

// Keys live in this process's memory: for ranks that are threads of one process.
class InProcessStore final : public Store {
 public:
  void set(const std::string& key, const std::string& value) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  std::vector<bool> check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  using Store::wait;

 protected:
  bool try_get(const std::string& key, std::string& value) override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;
};

// One file per key in `dir` (created if missing), written atomically (temporary file,
// then rename); add and compare_set hold an flock on dir/.lock. For ranks that share a
// file system but no network rendezvous.
class FileStore final : public Store {
 public:
  explicit FileStore(std::string dir);
  void set(const std::string& key, const std::string& value) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  std::vector<bool> check(const std::vector<std::string>& keys) override;

 protected:
  bool try_get(const std::string& key, std::string& value) override;

 private:
  std::string path_of(const std::string& key) const;
  std::string dir_;
};

// Every key goes to `base` as prefix + "/" + key: one job, one restart.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);
  void set(const std::string& key, const std::string& value) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  std::vector<bool> check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  using Store::wait;
  const std::string& prefix() const { return prefix_; }

 protected:
  bool try_get(const std::string& key, std::string& value) override;

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const;
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace ember::comm
