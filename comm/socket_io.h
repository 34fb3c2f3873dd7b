// Whole-buffer send and receive on a connected socket, under a deadline: the TcpStore's
// requests and its handshake (comm/store_auth.h) never wait on a peer without one.
#pragma once

#include <chrono>
#include <cstddef>

namespace ember::comm {

using Deadline = std::chrono::steady_clock::time_point;
inline constexpr Deadline kNoDeadline = Deadline::max();

enum class IoStatus { kOk, kClosed, kTimedOut };  // kClosed: end of stream, or an error

IoStatus send_all(int fd, const void* data, std::size_t n, Deadline deadline);
IoStatus recv_all(int fd, void* data, std::size_t n, Deadline deadline);

}  // namespace ember::comm
