// The handshake that opens every connection to a TcpStore: both ends prove they hold the
// job's secret (comm/job_secret.h) without sending it.
//
// Note [Store handshake]. A challenge-response in each direction, HMAC-SHA256 keyed by
// the secret over both sides' fresh 32-byte nonces (from getrandom):
//   server -> client   "ember-store/1\n", Ns
//   client -> server   Nc, HMAC(secret, "ember-store/1 client" || Ns || Nc)
//   server -> client   'Y', HMAC(secret, "ember-store/1 server" || Ns || Nc)   or 'N' and close
// The server checks the client's proof (in constant time) before anything else is read,
// so a process without the secret is refused before it can touch a key or claim a rank:
// the job goes on waiting for its own ranks. The client checks the server's proof, so a
// rank never joins another job's store (two jobs on one port) nor one posing as its own.
// Each proof covers both nonces and its direction, so none can be replayed on another
// connection or reflected back. What it does not do: encrypt or authenticate the
// requests after the handshake; someone who can rewrite the traffic on the network (not
// merely connect to the port) is out of its reach, as with PyTorch's TCPStore (which
// has no authentication at all).
#pragma once

#include <string>
#include <string_view>

#include "comm/socket_io.h"

namespace ember::comm {

enum class HandshakeResult {
  kAccepted,
  kRefused,  // the peer answered with a wrong proof: it does not hold the job's secret
  kGone,     // the peer closed, sent something else, or did not answer by the deadline
};

// The server's side, on an accepted connection.
HandshakeResult serve_handshake(int fd, std::string_view secret, Deadline deadline);

// The client's side; `where` ("host:port") names the store in errors. Throws ember::Error
// when the server refuses this process, does not prove the secret itself, is not an
// ember store, or does not answer by the deadline.
void client_handshake(int fd, std::string_view secret, Deadline deadline, const std::string& where);

}  // namespace ember::comm
