// TcpStore: the rendezvous store over TCP. Rank 0 serves the keys (a listening socket
// and one thread per connected rank); every rank, rank 0 included, is a client with one
// connection. Gloo ships no TCP store; this one is what MASTER_ADDR:MASTER_PORT names.
// Every connection opens with a handshake in which both ends prove the job's secret
// (Note [Store handshake], comm/store_auth.h): a process without it is refused, logged
// by the server, and takes nothing from the job. Every request waits for its answer up
// to the store's timeout (a wait() up to its own), never longer.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "comm/socket_io.h"
#include "comm/store.h"

namespace ember::comm {

struct TcpStoreOptions {
  std::string secret;                // the job's secret (comm/job_secret.h); required
  Duration timeout = kDefaultTimeout;  // connecting, each request, and wait()'s default
  bool loopback_only = true;         // serve: listen on 127.0.0.1 only (a job on one node)
};

class TcpStore final : public Store {
 public:
  // Serves on `port` (0: a free port the system picks; see port()) of the loopback
  // interface, or of every interface unless options.loopback_only, and connects to it.
  // A port in use is an ember::Error saying so, with what to do.
  static std::shared_ptr<TcpStore> serve(int port, const TcpStoreOptions& options);
  // Connects to the server at host:port, retrying until the timeout (the server may start
  // after its clients). A server that refuses this process's proof, or cannot prove the
  // secret itself, is an ember::Error at once.
  static std::shared_ptr<TcpStore> connect(const std::string& host, int port, const TcpStoreOptions& options);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  int port() const { return port_; }
  bool is_server() const { return server_ != nullptr; }
  // The address the server listens on ("127.0.0.1", "::"), from getsockname; empty for a client.
  std::string listen_address() const;

  void set(const std::string& key, const std::string& value) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  std::vector<bool> check(const std::vector<std::string>& keys) override;

  struct Server;  // comm/tcp_store.cpp

 protected:
  bool try_get(const std::string& key, std::string& value) override;
  std::vector<bool> check_until(const std::vector<std::string>& keys, Deadline deadline) override;

 private:
  TcpStore() = default;
  // One request, one answer; the answer must come by `deadline` (default: the timeout from now).
  std::vector<std::string> request(uint8_t cmd, const std::vector<std::string>& args, bool* found = nullptr,
                                   Deadline deadline = kNoDeadline);

  std::unique_ptr<Server> server_;
  std::string host_;
  int port_ = 0;
  int fd_ = -1;
  std::mutex mu_;  // one request at a time on the connection
};

}  // namespace ember::comm
