// TcpStore (comm/tcp_store.h). The wire format is one request, one response:
//   request  = cmd:u8, n:u32, n × (len:u32, bytes)
//   response = found:u8, n:u32, n × (len:u32, bytes)
// The server keeps its keys in an InProcessStore, so both stores share one semantics.
#include "comm/tcp_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "base/error.h"

namespace ember::comm {
namespace {

enum Cmd : uint8_t { kSet = 1, kGet, kAdd, kCas, kCheck };

bool write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::recv(fd, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool send_msg(int fd, uint8_t head, const std::vector<std::string>& parts) {
  std::string buf(1, static_cast<char>(head));
  auto put32 = [&](uint32_t v) { buf.append(reinterpret_cast<const char*>(&v), 4); };
  put32(static_cast<uint32_t>(parts.size()));
  for (const auto& s : parts) {
    put32(static_cast<uint32_t>(s.size()));
    buf += s;
  }
  return write_all(fd, buf.data(), buf.size());
}

bool recv_msg(int fd, uint8_t& head, std::vector<std::string>& parts) {
  uint32_t n;
  if (!read_all(fd, &head, 1) || !read_all(fd, &n, 4)) return false;
  if (n > (1u << 20)) return false;
  parts.assign(n, {});
  for (auto& s : parts) {
    uint32_t len;
    if (!read_all(fd, &len, 4) || len > (1u << 30)) return false;
    s.resize(len);
    if (len && !read_all(fd, s.data(), len)) return false;
  }
  return true;
}

}  // namespace

struct TcpStore::Server {
  InProcessStore kv;
  int listen_fd = -1;
  std::thread acceptor;
  std::mutex mu;
  std::vector<int> clients;
  std::vector<std::thread> threads;
  bool stopping = false;

  void serve_client(int fd) {
    uint8_t cmd;
    std::vector<std::string> a;
    while (recv_msg(fd, cmd, a)) {
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
      if (!send_msg(fd, found, out)) break;
    }
  }

  void accept_loop() {
    while (true) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
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
      threads.emplace_back([this, fd] { serve_client(fd); });
    }
  }

  ~Server() {
    {
      std::lock_guard lock(mu);
      stopping = true;
      for (int fd : clients) ::shutdown(fd, SHUT_RDWR);
    }
    ::shutdown(listen_fd, SHUT_RDWR);
    if (acceptor.joinable()) acceptor.join();
    for (auto& t : threads) t.join();
    for (int fd : clients) ::close(fd);
    ::close(listen_fd);
  }
};

std::shared_ptr<TcpStore> TcpStore::serve(int port, Duration timeout) {
  EMBER_CHECK(port >= 0 && port < 65536, "TcpStore: port ", port, " is out of range (0-65535)");
  auto server = std::make_unique<Server>();
  server->listen_fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool v6 = server->listen_fd >= 0;
  if (!v6) server->listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
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
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(server->listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  }
  if (rc != 0) {
    const int err = errno;
    ::close(server->listen_fd);
    server->listen_fd = -1;
    EMBER_FAIL("TcpStore: cannot listen on port ", port, ": ", std::strerror(err),
               err == EADDRINUSE ? " (another job, or a previous one still exiting, holds it: choose another "
                                   "MASTER_PORT / --master-port)"
                                 : "");
  }
  EMBER_CHECK(::listen(server->listen_fd, 128) == 0, "TcpStore: listen failed: ", std::strerror(errno));
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(server->listen_fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int actual = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  Server* s = server.get();
  server->acceptor = std::thread([s] { s->accept_loop(); });
  auto store = connect("127.0.0.1", actual, timeout);
  store->server_ = std::move(server);
  return store;
}

std::shared_ptr<TcpStore> TcpStore::connect(const std::string& host, int port, Duration timeout) {
  EMBER_CHECK(port > 0 && port < 65536, "TcpStore: port ", port, " is out of range (1-65535)");
  std::shared_ptr<TcpStore> store(new TcpStore());
  store->host_ = host;
  store->port_ = port;
  store->set_timeout(timeout);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
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
        const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
          int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          store->fd_ = fd;
          break;
        }
        last_error = std::strerror(errno);
        ::close(fd);
      }
      ::freeaddrinfo(res);
    }
    if (store->fd_ >= 0) return store;
    if (std::chrono::steady_clock::now() >= deadline)
      EMBER_FAIL("TcpStore: cannot connect to ", host, ":", port, " within ", timeout.count(), " ms (", last_error,
                 "); is rank 0 running, and are MASTER_ADDR and MASTER_PORT right?");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, Duration(200));
  }
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();
}

std::vector<std::string> TcpStore::request(uint8_t cmd, const std::vector<std::string>& args, bool* found) {
  std::lock_guard lock(mu_);
  uint8_t head = 0;
  std::vector<std::string> out;
  EMBER_CHECK(send_msg(fd_, cmd, args) && recv_msg(fd_, head, out), "TcpStore: lost the connection to the store at ",
              host_, ":", port_, " (did rank 0 exit?)");
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

std::vector<bool> TcpStore::check(const std::vector<std::string>& keys) {
  std::vector<std::string> r = request(kCheck, keys);
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
