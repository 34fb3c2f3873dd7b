// TcpStore (comm/tcp_store.h). A connection opens with the handshake of comm/store_auth.h;
// then the wire format is one request, one response:
//   request  = cmd:u8, n:u32, n × (len:u32, bytes)
//   response = found:u8, n:u32, n × (len:u32, bytes)
// The server keeps its keys in an InProcessStore, so both stores share one semantics.
#include "comm/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "base/error.h"
#include "comm/store_auth.h"

namespace ember::comm {
namespace {

using Clock = std::chrono::steady_clock;

enum Cmd : uint8_t { kSet = 1, kGet, kAdd, kCas, kCheck };

IoStatus send_msg(int fd, uint8_t head, const std::vector<std::string>& parts, Deadline deadline) {
  std::string buf(1, static_cast<char>(head));
  auto put32 = [&](uint32_t v) { buf.append(reinterpret_cast<const char*>(&v), 4); };
  put32(static_cast<uint32_t>(parts.size()));
  for (const auto& s : parts) {
    put32(static_cast<uint32_t>(s.size()));
    buf += s;
  }
  return send_all(fd, buf.data(), buf.size(), deadline);
}

IoStatus recv_msg(int fd, uint8_t& head, std::vector<std::string>& parts, Deadline deadline) {
  uint32_t n;
  IoStatus st = recv_all(fd, &head, 1, deadline);
  if (st == IoStatus::kOk) st = recv_all(fd, &n, 4, deadline);
  if (st != IoStatus::kOk) return st;
  if (n > (1u << 20)) return IoStatus::kClosed;
  parts.assign(n, {});
  for (auto& s : parts) {
    uint32_t len;
    if ((st = recv_all(fd, &len, 4, deadline)) != IoStatus::kOk) return st;
    if (len > (1u << 30)) return IoStatus::kClosed;
    s.resize(len);
    if (len && (st = recv_all(fd, s.data(), len, deadline)) != IoStatus::kOk) return st;
  }
  return IoStatus::kOk;
}

std::string address_text(const sockaddr_storage& a) {
  char text[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    port = ntohs(in->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
    port = ntohs(in6->sin6_port);
  }
  return std::string(text) + (port ? ":" + std::to_string(port) : "");
}

// Connects `fd` (non-blocking) to `addr` by the deadline; 0 or an errno.
int connect_by(int fd, const sockaddr* addr, socklen_t len, Deadline deadline) {
  if (::connect(fd, addr, len) == 0) return 0;
  if (errno != EINPROGRESS) return errno;
  const auto left = std::chrono::duration_cast<Duration>(deadline - Clock::now()).count();
  pollfd p{fd, POLLOUT, 0};
  if (::poll(&p, 1, static_cast<int>(std::clamp<long long>(left, 0, 1 << 30))) <= 0) return ETIMEDOUT;
  int err = 0;
  socklen_t err_len = sizeof err;
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len);
  return err;
}

}  // namespace

struct TcpStore::Server {
  InProcessStore kv;
  TcpStoreOptions options;
  int port = 0;
  int listen_fd = -1;
  std::thread acceptor;
  std::mutex mu;
  std::vector<int> clients;  // open connections; each thread closes its own and sets -1
  std::vector<std::thread> threads;
  bool stopping = false;

  void serve_client(size_t slot, int fd, const std::string& peer) {
    const HandshakeResult hs = serve_handshake(fd, options.secret, Clock::now() + options.timeout);
    if (hs == HandshakeResult::kRefused)
      std::fprintf(stderr,
                   "ember: the store on port %d refused a connection from %s: it did not prove the job's secret "
                   "(another job's process, or one started without EMBER_JOB_SECRET); still waiting for the job's "
                   "own ranks\n",
                   port, peer.c_str());
    if (hs == HandshakeResult::kAccepted) serve_requests(fd);
    std::lock_guard lock(mu);
    ::close(fd);
    clients[slot] = -1;
  }

  void serve_requests(int fd) {
    uint8_t cmd;
    std::vector<std::string> a;
    while (recv_msg(fd, cmd, a, kNoDeadline) == IoStatus::kOk) {
      std::vector<std::string> out;
      uint8_t found = 1;
      try {
        if (cmd == kSet && a.size() == 2) {
          kv.set(a[0], a[1]);
        } else if (cmd == kGet && a.size() == 1) {
          auto present = kv.check({a[0]});
          found = present[0];
          if (found) out.push_back(kv.get(a[0]));
        } else if (cmd == kAdd && a.size() == 2) {
          out.push_back(std::to_string(kv.add(a[0], std::stoll(a[1]))));
        } else if (cmd == kCas && a.size() == 3) {
          out.push_back(kv.compare_set(a[0], a[1], a[2]));
        } else if (cmd == kCheck) {
          for (bool b : kv.check(a)) out.push_back(b ? "1" : "0");
        } else {
          break;  // a malformed request: drop the connection
        }
      } catch (const std::exception& e) {
        found = 2;  // an error, its message follows
        out = {e.what()};
      }
      if (send_msg(fd, found, out, Clock::now() + options.timeout) != IoStatus::kOk) break;
    }
  }

  void accept_loop() {
    while (true) {
      sockaddr_storage peer{};
      socklen_t peer_len = sizeof peer;
      const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &peer_len, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // shut down
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::lock_guard lock(mu);
      if (stopping) {
        ::close(fd);
        return;
      }
      clients.push_back(fd);
      threads.emplace_back([this, slot = clients.size() - 1, fd, who = address_text(peer)] {
        serve_client(slot, fd, who);
      });
    }
  }

  ~Server() {
    {
      std::lock_guard lock(mu);
      stopping = true;
      for (int fd : clients)
        if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
    }
    ::shutdown(listen_fd, SHUT_RDWR);
    if (acceptor.joinable()) acceptor.join();
    for (auto& t : threads) t.join();
    ::close(listen_fd);
  }
};

std::shared_ptr<TcpStore> TcpStore::serve(int port, const TcpStoreOptions& options) {
  EMBER_CHECK(port >= 0 && port < 65536, "TcpStore: port ", port, " is out of range (0-65535)");
  EMBER_CHECK(!options.secret.empty(), "TcpStore: no job secret to serve with (comm/job_secret.h)");
  auto server = std::make_unique<Server>();
  server->options = options;
  // One node: the loopback interface only, so nothing off this machine can reach it.
  // Several: every interface, IPv6 and IPv4 on one socket where the system has IPv6.
  bool v6 = !options.loopback_only;
  server->listen_fd = v6 ? ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0) : -1;
  if (server->listen_fd < 0) {
    v6 = false;
    server->listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  }
  EMBER_CHECK(server->listen_fd >= 0, "TcpStore: cannot create a socket: ", std::strerror(errno));
  int one = 1, zero = 0;
  ::setsockopt(server->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc;
  if (v6) {
    ::setsockopt(server->listen_fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    addr.sin6_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(server->listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  } else {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(options.loopback_only ? INADDR_LOOPBACK : INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(server->listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  }
  if (rc == 0) rc = ::listen(server->listen_fd, 128);
  if (rc != 0) {
    const int err = errno;
    ::close(server->listen_fd);
    server->listen_fd = -1;
    EMBER_FAIL("TcpStore: cannot listen on port ", port, ": ", std::strerror(err),
               err == EADDRINUSE ? " (another job, or a previous one still exiting, holds it: choose another "
                                   "MASTER_PORT / --master-port)"
                                 : "");
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(server->listen_fd, reinterpret_cast<sockaddr*>(&bound), &len);
  server->port = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                          : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  Server* s = server.get();
  server->acceptor = std::thread([s] { s->accept_loop(); });
  auto store = connect("127.0.0.1", server->port, options);
  store->server_ = std::move(server);
  return store;
}

std::string TcpStore::listen_address() const {
  if (!server_) return "";
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (::getsockname(server_->listen_fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) return "";
  const std::string text = address_text(bound);
  return text.substr(0, text.rfind(':'));
}

std::shared_ptr<TcpStore> TcpStore::connect(const std::string& host, int port, const TcpStoreOptions& options) {
  EMBER_CHECK(port > 0 && port < 65536, "TcpStore: port ", port, " is out of range (1-65535)");
  EMBER_CHECK(!options.secret.empty(), "TcpStore: no job secret to connect with (comm/job_secret.h)");
  std::shared_ptr<TcpStore> store(new TcpStore());
  store->host_ = host;
  store->port_ = port;
  store->set_timeout(options.timeout);
  const Duration timeout = options.timeout;
  const auto deadline = Clock::now() + timeout;
  std::string last_error = "no address";
  Duration pause(5);
  while (true) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    const int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (gai != 0) {
      last_error = std::string("cannot resolve host: ") + ::gai_strerror(gai);
    } else {
      for (addrinfo* ai = res; ai; ai = ai->ai_next) {
        const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) continue;
        if (const int err = connect_by(fd, ai->ai_addr, ai->ai_addrlen, deadline); err == 0) {
          int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          store->fd_ = fd;
          break;
        } else {
          last_error = std::strerror(err);
        }
        ::close(fd);
      }
      ::freeaddrinfo(res);
    }
    if (store->fd_ >= 0) break;
    if (Clock::now() >= deadline)
      EMBER_FAIL("TcpStore: cannot connect to ", host, ":", port, " within ", timeout.count(), " ms (", last_error,
                 "); is rank 0 running, and are MASTER_ADDR and MASTER_PORT right?");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, Duration(200));
  }
  // Errors here are final: a store that refuses this process will not accept it later.
  client_handshake(store->fd_, options.secret, deadline, host + ":" + std::to_string(port));
  return store;
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();
}

std::vector<std::string> TcpStore::request(uint8_t cmd, const std::vector<std::string>& args, bool* found,
                                           Deadline deadline) {
  std::lock_guard lock(mu_);
  if (deadline == kNoDeadline) deadline = Clock::now() + timeout();
  EMBER_CHECK(fd_ >= 0, "TcpStore: the connection to the store at ", host_, ":", port_,
              " was closed after a request went unanswered");
  uint8_t head = 0;
  std::vector<std::string> out;
  IoStatus st = send_msg(fd_, cmd, args, deadline);
  if (st == IoStatus::kOk) st = recv_msg(fd_, head, out, deadline);
  if (st == IoStatus::kTimedOut) {
    ::close(fd_);  // an answer arriving later would be taken for the next request's
    fd_ = -1;
    EMBER_FAIL("TcpStore: the store at ", host_, ":", port_, " gave no answer in time (the store's timeout is ",
               timeout().count(), " ms: EMBER_COMM_TIMEOUT_S): is rank 0 stopped, or its machine unreachable?");
  }
  EMBER_CHECK(st == IoStatus::kOk, "TcpStore: lost the connection to the store at ", host_, ":", port_,
              " (did rank 0 exit?)");
  if (head == 2) EMBER_FAIL(out.empty() ? std::string("TcpStore: the server failed") : out[0]);
  if (found) *found = head == 1;
  return out;
}

void TcpStore::set(const std::string& key, const std::string& value) { request(kSet, {key, value}); }

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  return std::stoll(request(kAdd, {key, std::to_string(delta)}).at(0));
}

std::string TcpStore::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  return request(kCas, {key, expected, desired}).at(0);
}

std::vector<bool> TcpStore::check(const std::vector<std::string>& keys) { return check_until(keys, kNoDeadline); }

// Within a wait(): the answer must come by the wait's deadline, but each request gets at
// least a second (or the timeout) so that a healthy store's answer is never cut off.
std::vector<bool> TcpStore::check_until(const std::vector<std::string>& keys, Deadline deadline) {
  if (deadline != kNoDeadline) deadline = std::max(deadline, Clock::now() + std::min(timeout(), Duration(1000)));
  std::vector<std::string> r = request(kCheck, keys, nullptr, deadline);
  std::vector<bool> out;
  for (const auto& s : r) out.push_back(s == "1");
  return out;
}

bool TcpStore::try_get(const std::string& key, std::string& value) {
  bool found = false;
  std::vector<std::string> r = request(kGet, {key}, &found);
  if (found) value = r.at(0);
  return found;
}

}  // namespace ember::comm
