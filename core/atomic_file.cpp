// Note [Atomic file writes]. What `AtomicFile(path)` writes, and what a crash leaves:
//
// 1. The target is the file the path names: a symlink is followed (a chain too, up to
//    40 links) and the file it ends at is replaced, so a checkpoint path that links into
//    another folder updates the file there, and the link stays a link. The rename in 3
//    must happen beside the target, on its filesystem. An end that exists must be a
//    regular file: a directory, a device node (/dev/null as root), a FIFO or a socket is
//    refused, never replaced by a regular file.
// 2. The bytes go to an *unnamed* file in the target's folder (open(O_TMPFILE)). It has
//    no name until the end, so a process killed while writing (kill -9, SIGTERM from
//    ember-run stopping the ranks, Ctrl-C) leaves nothing: the kernel frees the file with
//    its last descriptor. It takes the old file's mode (0600 stays 0600) and owner
//    (fchown; a process that may not give a file away is refused at the start, rather
//    than replacing someone's file with its own); a new file gets 0666 less the umask.
// 3. commit(): fsync the file; link it under a temporary name (.NAME.ember-tmp.HOST.PID.R,
//    through /proc/self/fd, which needs no privilege); rename that over the target (atomic:
//    readers see the old or the new file, never a mix); fsync the folder, so that the
//    rename itself survives a power cut.
// 4. Between the link and the rename (two system calls) a kill leaves the named temporary.
//    So every AtomicFile first removes, in its target's folder, the temporaries of writers
//    on this host whose process is gone (kill(pid, 0) fails with ESRCH), and the PATH.tmp.PID
//    files that ember wrote before this scheme. A process that is alive, or of another host
//    sharing the folder, keeps its temporary. The same cleanup covers filesystems without
//    O_TMPFILE, where the temporary is named from the start.
// Why both: O_TMPFILE alone cannot replace a file atomically (linkat never overwrites), and
// named temporaries alone leave a full-sized file behind for every kill during a write,
// until the next save; together, a kill leaves nothing except in the window between two
// system calls, and the next save removes that. Hard links to the old file keep the old
// contents (a rename replaces a name, as every atomic writer does); extended attributes
// and ACLs are not copied.
#include "core/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "base/error.h"

namespace ember {
namespace {

constexpr int kMaxLinks = 40;  // as the kernel's path walk (ELOOP)
std::atomic<bool> g_unnamed{true};

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

std::string dir_of(const std::string& p) {
  const auto slash = p.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : p.substr(0, slash);
}

std::string base_of(const std::string& p) {
  const auto slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// This host's name as it appears in temporary names: letters, digits and '-' only.
const std::string& host_tag() {
  static const std::string tag = [] {
    char buf[HOST_NAME_MAX + 1] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0) return std::string("host");
    std::string h(buf);
    for (char& c : h)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') c = '-';
    return h.empty() ? std::string("host") : h.substr(0, 64);
  }();
  return tag;
}

bool parse_pid(const std::string& s, pid_t& pid) {
  const char* end = s.data() + s.size();
  const auto [p, ec] = std::from_chars(s.data(), end, pid);
  return ec == std::errc() && p == end && pid > 0;
}

bool process_gone(pid_t pid) { return pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH; }

// Step 4 of the Note: the temporaries of dead writers in `dir`.
void remove_stale_temps(const std::string& dir, const std::string& name) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  const std::string marker = ".ember-tmp." + host_tag() + ".", legacy = name + ".tmp.";
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    pid_t pid = 0;
    if (const auto at = n.find(marker); n[0] == '.' && at != std::string::npos) {
      const std::string rest = n.substr(at + marker.size());  // PID.R
      const auto dot = rest.find('.');
      if (dot == std::string::npos || !parse_pid(rest.substr(0, dot), pid)) continue;
    } else if (n.size() > legacy.size() && n.compare(0, legacy.size(), legacy) == 0) {
      if (!parse_pid(n.substr(legacy.size()), pid)) continue;
    } else {
      continue;
    }
    if (process_gone(pid)) ::unlinkat(::dirfd(d), n.c_str(), 0);
  }
  ::closedir(d);
}

// A fresh name for a temporary beside `target` (Note, step 3).
std::string temp_name(const std::string& target) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char r[17];
  std::snprintf(r, sizeof r, "%016llx", static_cast<unsigned long long>(rng()));
  // The target's name, cut so that the whole stays within NAME_MAX (255).
  return dir_of(target) + "/." + base_of(target).substr(0, 120) + ".ember-tmp." + host_tag() + "." +
         std::to_string(::getpid()) + "." + r;
}

}  // namespace

std::string resolve_write_target(const std::string& path, const std::string& what) {
  EMBER_CHECK(!path.empty(), what, ": the path is empty");
  std::string p = path;
  for (int links = 0;; ++links) {
    struct stat st{};
    if (::lstat(p.c_str(), &st) != 0) {
      if (errno == ENOENT) return p;  // a new file; a missing folder fails when the file is made
      EMBER_FAIL(what, ": cannot write '", path, "': ", std::strerror(errno));
    }
    if (!S_ISLNK(st.st_mode)) {
      EMBER_CHECK(S_ISREG(st.st_mode), what, ": '", path, "'", p == path ? "" : " (a link to '" + p + "')", " is ",
                  kind_of(st.st_mode), ", not a regular file: refusing to replace it");
      return p;
    }
    EMBER_CHECK(links < kMaxLinks, what, ": cannot write '", path, "': its symbolic links loop (or chain more than ",
                kMaxLinks, " deep)");
    std::vector<char> buf(static_cast<size_t>(std::max<off_t>(st.st_size, PATH_MAX)) + 1);
    const ssize_t n = ::readlink(p.c_str(), buf.data(), buf.size() - 1);
    EMBER_CHECK(n >= 0, what, ": cannot read the link '", p, "': ", std::strerror(errno));
    const std::string next(buf.data(), static_cast<size_t>(n));
    p = next[0] == '/' ? next : dir_of(p) + "/" + next;
  }
}

AtomicFile::AtomicFile(std::string path, std::string what) : path_(std::move(path)), what_(std::move(what)) {
  target_ = resolve_write_target(path_, what_);
  const std::string dir = dir_of(target_);
  remove_stale_temps(dir, base_of(target_));
  if (g_unnamed.load()) fd_ = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
  // Without O_TMPFILE on this filesystem (or asked not to): a named temporary.
  if (fd_ < 0 && (!g_unnamed.load() || errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    tmp_ = temp_name(target_);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0) tmp_.clear();
  }
  EMBER_CHECK(fd_ >= 0, what_, ": cannot write '", path_, "': cannot create a file in '", dir, "': ",
              std::strerror(errno));
  struct stat old{};
  if (::stat(target_.c_str(), &old) == 0) keep_mode_and_owner(&old);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::keep_mode_and_owner(const void* old_stat) {
  const auto& old = *static_cast<const struct stat*>(old_stat);
  struct stat mine{};
  if (::fstat(fd_, &mine) != 0) fail("inspect the new file of '" + path_ + "'");
  if ((mine.st_uid != old.st_uid || mine.st_gid != old.st_gid) && ::fchown(fd_, old.st_uid, old.st_gid) != 0)
    fail(detail::str("write '", path_, "' keeping its owner (uid ", old.st_uid, ", gid ", old.st_gid,
                     "; this process runs as uid ", ::geteuid(), ")"));
  // After fchown, which clears the set-user-ID and set-group-ID bits.
  if (::fchmod(fd_, old.st_mode & 07777) != 0) fail("keep the mode of '" + path_ + "'");
}

void AtomicFile::fail(const std::string& doing) {
  const int err = errno;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
  EMBER_FAIL(what_, ": cannot ", doing, ": ", std::strerror(err));
}

void AtomicFile::write(const void* data, std::size_t n) {
  EMBER_CHECK(fd_ >= 0, what_, ": write to a file already committed or failed");
  const char* c = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("write '" + path_ + "'");
    c += w;
    n -= static_cast<std::size_t>(w);
  }
}

void AtomicFile::commit() {
  EMBER_CHECK(fd_ >= 0, what_, ": commit of a file already committed or failed");
  if (::fsync(fd_) != 0) fail("flush '" + path_ + "' to disk");
  if (tmp_.empty()) {  // unnamed: a name to rename from
    tmp_ = temp_name(target_);
    const std::string self = "/proc/self/fd/" + std::to_string(fd_);
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, tmp_.c_str(), AT_SYMLINK_FOLLOW) != 0 &&
        ::linkat(fd_, "", AT_FDCWD, tmp_.c_str(), AT_EMPTY_PATH) != 0) {  // without /proc: needs privilege
      tmp_.clear();
      fail("name the new file of '" + path_ + "'");
    }
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 || ::rename(tmp_.c_str(), target_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    tmp_.clear();
    EMBER_FAIL(what_, ": cannot write '", path_, "': ", std::strerror(err));
  }
  tmp_.clear();
  // The rename is in the folder's data: flushed too, or a power cut may undo it. A folder
  // this process may not open (write and search permission only) is left as it is.
  const int dir = ::open(dir_of(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;
  const bool synced = ::fsync(dir) == 0 || errno == EINVAL;  // EINVAL: no fsync for folders here
  const int err = errno;
  ::close(dir);
  EMBER_CHECK(synced, what_, ": wrote '", path_, "' but cannot flush its folder to disk: ", std::strerror(err));
}

void write_file_atomically(const std::string& path, const std::string& contents, const std::string& what) {
  AtomicFile f(path, what);
  f.write(contents);
  f.commit();
}

void check_can_write(const std::string& path, const std::string& what) { AtomicFile probe(path, what); }

std::string read_file(const std::string& path, const std::string& what) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer before fstat can refuse it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  EMBER_CHECK(fd >= 0, what, ": cannot open '", path, "': ", std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st{};
  EMBER_CHECK(::fstat(fd, &st) == 0, what, ": cannot read '", path, "': ", std::strerror(errno));
  EMBER_CHECK(S_ISREG(st.st_mode), what, ": '", path, "' is ", kind_of(st.st_mode), ", not a file to read");
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    EMBER_CHECK(n >= 0, what, ": cannot read '", path, "': ", std::strerror(errno));
    if (n == 0) break;  // the file shrank while it was read: the parser reports what is missing
    got += static_cast<size_t>(n);
  }
  bytes.resize(got);
  return bytes;
}

namespace detail {
void set_unnamed_temp_files(bool enabled) { g_unnamed = enabled; }
}  // namespace detail

}  // namespace ember
