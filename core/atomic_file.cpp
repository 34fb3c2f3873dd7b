#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/error.h"

namespace ember {

AtomicFile::AtomicFile(std::string path, std::string what)
    : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(::getpid())), what_(std::move(what)) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  EMBER_CHECK(fd_ >= 0, what_, ": cannot create '", tmp_, "': ", std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFile::fail(const char* doing) {
  const int err = errno;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  EMBER_FAIL(what_, ": cannot ", doing, " '", tmp_, "': ", std::strerror(err));
}

void AtomicFile::write(const void* data, std::size_t n) {
  EMBER_CHECK(fd_ >= 0, what_, ": write to a file already committed or failed");
  const char* c = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("write");
    c += w;
    n -= static_cast<std::size_t>(w);
  }
}

void AtomicFile::commit() {
  EMBER_CHECK(fd_ >= 0, what_, ": commit of a file already committed or failed");
  if (::fsync(fd_) != 0) fail("flush");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 || ::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    EMBER_FAIL(what_, ": cannot write '", path_, "': ", std::strerror(err));
  }
}

void write_file_atomically(const std::string& path, const std::string& contents, const std::string& what) {
  AtomicFile f(path, what);
  f.write(contents);
  f.commit();
}

void check_can_write(const std::string& path, const std::string& what) {
  EMBER_CHECK(!path.empty(), what, ": the path is empty");
  struct stat st{};
  EMBER_CHECK(::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode), what, ": '", path,
              "' is a directory, expected a file path");
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  std::string probe = dir + "/.ember-write-check-XXXXXX";
  const int fd = ::mkstemp(probe.data());
  EMBER_CHECK(fd >= 0, what, ": cannot write '", path, "': cannot create a file in '", dir, "': ",
              std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace ember
