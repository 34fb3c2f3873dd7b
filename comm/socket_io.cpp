// Whole-buffer send and receive under a deadline (comm/socket_io.h): poll until the
// socket is ready or the deadline passes, then one send or recv, until done.
#include "comm/socket_io.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>

namespace ember::comm {
namespace {

// Waits until `fd` is ready for `events`; kTimedOut when the deadline passes first.
IoStatus ready(int fd, short events, Deadline deadline) {
  while (true) {
    int wait_ms = -1;
    if (deadline != kNoDeadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() < 0) return IoStatus::kTimedOut;
      wait_ms = static_cast<int>(std::min<long long>(left.count() + 1, INT_MAX));
    }
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, wait_ms);
    if (r > 0) return IoStatus::kOk;  // ready, or an error the next call reports
    if (r < 0 && errno != EINTR) return IoStatus::kClosed;
  }
}

}  // namespace

IoStatus send_all(int fd, const void* data, std::size_t n, Deadline deadline) {
  const char* c = static_cast<const char*>(data);
  while (n > 0) {
    if (const IoStatus s = ready(fd, POLLOUT, deadline); s != IoStatus::kOk) return s;
    const ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (w <= 0) return IoStatus::kClosed;
    c += w;
    n -= static_cast<std::size_t>(w);
  }
  return IoStatus::kOk;
}

IoStatus recv_all(int fd, void* data, std::size_t n, Deadline deadline) {
  char* c = static_cast<char*>(data);
  while (n > 0) {
    if (const IoStatus s = ready(fd, POLLIN, deadline); s != IoStatus::kOk) return s;
    const ssize_t r = ::recv(fd, c, n, MSG_DONTWAIT);
    if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (r <= 0) return IoStatus::kClosed;
    c += r;
    n -= static_cast<std::size_t>(r);
  }
  return IoStatus::kOk;
}

}  // namespace ember::comm
