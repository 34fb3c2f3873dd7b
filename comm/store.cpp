// Store's waiting logic and the in-process, file and prefix stores (comm/store.h).
#include "comm/store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/error.h"

namespace ember::comm {
namespace {

std::string missing_list(const std::vector<std::string>& keys, const std::vector<bool>& present) {
  std::string out;
  int n = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (present[i]) continue;
    if (n++ < 8) out += (out.empty() ? "" : ", ") + ("'" + keys[i] + "'");
  }
  if (n > 8) out += ", ... (" + std::to_string(n) + " in all)";
  return out;
}

[[noreturn]] void throw_timeout(const std::vector<std::string>& keys, const std::vector<bool>& present,
                                Duration timeout) {
  EMBER_FAIL("store wait: timed out after ", timeout.count(), " ms waiting for ", keys.size(),
             " key(s); still missing: ", missing_list(keys, present),
             " (a rank that never arrived, or that failed before setting them)");
}

int64_t parse_int(const std::string& key, const std::string& v) {
  try {
    size_t used = 0;
    const long long x = std::stoll(v, &used);
    if (used == v.size()) return x;
  } catch (const std::exception&) {
  }
  EMBER_FAIL("store add: key '", key, "' holds '", v, "', not an integer");
}

}  // namespace

std::string Store::get(const std::string& key) {
  wait({key}, timeout_);
  std::string v;
  EMBER_CHECK(try_get(key, v), "store get: key '", key, "' vanished after it was set");
  return v;
}

// Polls with a growing pause (1 ms up to 20 ms): stores whose keys live elsewhere (a
// file system, rank 0's TCP server) have no way to signal a new key.
void Store::wait(const std::vector<std::string>& keys, Duration timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Duration pause(1);
  while (true) {
    const std::vector<bool> present = check_until(keys, deadline);
    if (std::all_of(present.begin(), present.end(), [](bool b) { return b; })) return;
    if (std::chrono::steady_clock::now() >= deadline) throw_timeout(keys, present, timeout);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, Duration(20));
  }
}

// ----- InProcessStore -----

void InProcessStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard lock(mu_);
    kv_[key] = value;
  }
  cv_.notify_all();
}

int64_t InProcessStore::add(const std::string& key, int64_t delta) {
  int64_t sum;
  {
    std::lock_guard lock(mu_);
    auto it = kv_.find(key);
    sum = (it == kv_.end() ? 0 : parse_int(key, it->second)) + delta;
    kv_[key] = std::to_string(sum);
  }
  cv_.notify_all();
  return sum;
}

std::string InProcessStore::compare_set(const std::string& key, const std::string& expected,
                                        const std::string& desired) {
  std::string now;
  {
    std::lock_guard lock(mu_);
    auto it = kv_.find(key);
    if ((it == kv_.end() && expected.empty()) || (it != kv_.end() && it->second == expected)) kv_[key] = desired;
    now = kv_.count(key) ? kv_[key] : std::string();
  }
  cv_.notify_all();
  return now;
}

std::vector<bool> InProcessStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mu_);
  std::vector<bool> out;
  for (const auto& k : keys) out.push_back(kv_.count(k) > 0);
  return out;
}

void InProcessStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  std::unique_lock lock(mu_);
  auto all = [&] { return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return kv_.count(k); }); };
  if (cv_.wait_for(lock, timeout, all)) return;
  std::vector<bool> present;
  for (const auto& k : keys) present.push_back(kv_.count(k) > 0);
  lock.unlock();
  throw_timeout(keys, present, timeout);
}

bool InProcessStore::try_get(const std::string& key, std::string& value) {
  std::lock_guard lock(mu_);
  auto it = kv_.find(key);
  if (it == kv_.end()) return false;
  value = it->second;
  return true;
}

// ----- FileStore -----

namespace {

// Holds an exclusive flock on a file for its lifetime, taken within `timeout` (a process
// stopped while holding it must not stop the others forever).
class FileLock {
 public:
  FileLock(const std::string& path, Duration timeout) : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    EMBER_CHECK(fd_ >= 0, "FileStore: cannot open lock file ", path);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    Duration pause(1);
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) {
        const int err = errno;
        ::close(fd_);
        EMBER_FAIL("FileStore: cannot lock ", path, ": ", std::strerror(err));
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        ::close(fd_);
        EMBER_FAIL("FileStore: the lock ", path, " is still held after ", timeout.count(),
                   " ms (a process of the job stopped while holding it?)");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, Duration(20));
    }
  }
  ~FileLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

}  // namespace

FileStore::FileStore(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  EMBER_CHECK(std::filesystem::is_directory(dir_), "FileStore: cannot create folder '", dir_, "': ", ec.message());
}

// Keys may hold '/' and other bytes a file name cannot: they are hex-encoded.
std::string FileStore::path_of(const std::string& key) const {
  static const char* hex = "0123456789abcdef";
  std::string name = "k";
  for (unsigned char c : key) {
    name += hex[c >> 4];
    name += hex[c & 15];
  }
  return dir_ + "/" + name;
}

void FileStore::set(const std::string& key, const std::string& value) {
  const std::string path = path_of(key);
  const std::string tmp = path + ".tmp" + std::to_string(::getpid()) + "_" +
                          std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    EMBER_CHECK(out.good(), "FileStore: cannot write ", tmp);
  }
  EMBER_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "FileStore: cannot rename ", tmp, " to ", path);
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  FileLock lock(dir_ + "/.lock", timeout());
  std::string v;
  const int64_t sum = (try_get(key, v) ? parse_int(key, v) : 0) + delta;
  set(key, std::to_string(sum));
  return sum;
}

std::string FileStore::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  FileLock lock(dir_ + "/.lock", timeout());
  std::string v;
  const bool exists = try_get(key, v);
  if ((!exists && expected.empty()) || (exists && v == expected)) {
    set(key, desired);
    return desired;
  }
  return v;
}

std::vector<bool> FileStore::check(const std::vector<std::string>& keys) {
  std::vector<bool> out;
  for (const auto& k : keys) out.push_back(std::filesystem::exists(path_of(k)));
  return out;
}

bool FileStore::try_get(const std::string& key, std::string& value) { return read_file(path_of(key), value); }

// ----- PrefixStore -----

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  EMBER_CHECK(base_ != nullptr, "PrefixStore: no base store");
  set_timeout(base_->timeout());
}

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys) out.push_back(full(k));
  return out;
}

void PrefixStore::set(const std::string& key, const std::string& value) { base_->set(full(key), value); }
int64_t PrefixStore::add(const std::string& key, int64_t delta) { return base_->add(full(key), delta); }
std::string PrefixStore::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  return base_->compare_set(full(key), expected, desired);
}
std::vector<bool> PrefixStore::check(const std::vector<std::string>& keys) { return base_->check(full(keys)); }
void PrefixStore::wait(const std::vector<std::string>& keys, Duration timeout) { base_->wait(full(keys), timeout); }
bool PrefixStore::try_get(const std::string& key, std::string& value) {
  std::vector<bool> present = base_->check({full(key)});
  if (!present[0]) return false;
  value = base_->get(full(key));
  return true;
}

}  // namespace ember::comm
