// TcpStore: the rendezvous store over TCP. Rank 0 serves the keys (a listening socket
// and one thread per connected rank); every rank, rank 0 included, is a client with one
// connection. Gloo ships no TCP store; this one is what MASTER_ADDR:MASTER_PORT names.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "comm/store.h"

namespace ember::comm {

class TcpStore final : public Store {
 public:
  // Serves on `port` of every interface (0: a free port the system picks; see port()) and
  // connects to it. A port in use is an ember::Error saying so.
  static std::shared_ptr<TcpStore> serve(int port, Duration timeout = kDefaultTimeout);
  // Connects to the server at host:port, retrying until `timeout` (the server may start
  // after its clients).
  static std::shared_ptr<TcpStore> connect(const std::string& host, int port, Duration timeout = kDefaultTimeout);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  int port() const { return port_; }
  bool is_server() const { return server_ != nullptr; }

  void set(const std::string& key, const std::string& value) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  std::vector<bool> check(const std::vector<std::string>& keys) override;

  struct Server;  // comm/tcp_store.cpp

 protected:
  bool try_get(const std::string& key, std::string& value) override;

 private:
  TcpStore() = default;
  std::vector<std::string> request(uint8_t cmd, const std::vector<std::string>& args, bool* found = nullptr);

  std::unique_ptr<Server> server_;
  std::string host_;
  int port_ = 0;
  int fd_ = -1;
  std::mutex mu_;  // one request at a time on the connection
};

}  // namespace ember::comm
