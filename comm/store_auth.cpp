// The store's handshake (comm/store_auth.h, Note [Store handshake]).
#include "comm/store_auth.h"

#include <cstring>

#include "base/error.h"
#include "comm/job_secret.h"
#include "comm/sha256.h"

namespace ember::comm {
namespace {

constexpr char kGreeting[] = "ember-store/1\n";
constexpr std::size_t kGreetingSize = sizeof kGreeting - 1;
constexpr std::size_t kNonce = 32;
using Nonce = std::array<uint8_t, kNonce>;

Nonce fresh_nonce() {
  Nonce n;
  random_bytes(n.data(), n.size());
  return n;
}

Digest proof(std::string_view secret, const char* direction, const Nonce& ns, const Nonce& nc) {
  std::string msg = std::string("ember-store/1 ") + direction;
  msg.append(reinterpret_cast<const char*>(ns.data()), ns.size());
  msg.append(reinterpret_cast<const char*>(nc.data()), nc.size());
  return hmac_sha256(secret, msg);
}

}  // namespace

HandshakeResult serve_handshake(int fd, std::string_view secret, Deadline deadline) {
  const Nonce ns = fresh_nonce();
  std::string hello(kGreeting, kGreetingSize);
  hello.append(reinterpret_cast<const char*>(ns.data()), ns.size());
  Nonce nc;
  Digest claimed;
  if (send_all(fd, hello.data(), hello.size(), deadline) != IoStatus::kOk ||
      recv_all(fd, nc.data(), nc.size(), deadline) != IoStatus::kOk ||
      recv_all(fd, claimed.data(), claimed.size(), deadline) != IoStatus::kOk)
    return HandshakeResult::kGone;
  if (!digests_equal(claimed, proof(secret, "client", ns, nc))) {
    const char no = 'N';
    send_all(fd, &no, 1, deadline);
    return HandshakeResult::kRefused;
  }
  const Digest mine = proof(secret, "server", ns, nc);
  std::string yes(1, 'Y');
  yes.append(reinterpret_cast<const char*>(mine.data()), mine.size());
  return send_all(fd, yes.data(), yes.size(), deadline) == IoStatus::kOk ? HandshakeResult::kAccepted
                                                                         : HandshakeResult::kGone;
}

void client_handshake(int fd, std::string_view secret, Deadline deadline, const std::string& where) {
  auto fail_io = [&](IoStatus s, const char* step) {
    EMBER_FAIL("TcpStore: the store at ", where, s == IoStatus::kTimedOut ? " did not answer " : " closed the connection ",
               step, s == IoStatus::kTimedOut ? " before the timeout" : "",
               " (is rank 0 stopped, or is something other than this job's store on that port?)");
  };
  char greeting[kGreetingSize];
  Nonce ns;
  if (IoStatus s = recv_all(fd, greeting, kGreetingSize, deadline); s != IoStatus::kOk) fail_io(s, "with its greeting");
  EMBER_CHECK(std::memcmp(greeting, kGreeting, kGreetingSize) == 0, "TcpStore: what listens at ", where,
              " is not an ember store (it did not greet as one): check MASTER_ADDR and MASTER_PORT");
  if (IoStatus s = recv_all(fd, ns.data(), ns.size(), deadline); s != IoStatus::kOk) fail_io(s, "with its greeting");
  const Nonce nc = fresh_nonce();
  const Digest mine = proof(secret, "client", ns, nc);
  std::string answer(reinterpret_cast<const char*>(nc.data()), nc.size());
  answer.append(reinterpret_cast<const char*>(mine.data()), mine.size());
  if (IoStatus s = send_all(fd, answer.data(), answer.size(), deadline); s != IoStatus::kOk)
    fail_io(s, "while this rank proved the job's secret");
  char verdict = 0;
  if (IoStatus s = recv_all(fd, &verdict, 1, deadline); s != IoStatus::kOk) fail_io(s, "with its verdict");
  EMBER_CHECK(verdict == 'Y', "TcpStore: the store at ", where,
              " refused this process: it does not hold that job's secret. Either this process belongs to another "
              "job that was given the same port (choose another MASTER_PORT / --master-port), or it was started "
              "without the job's secret (ember-run passes it to its ranks as EMBER_JOB_SECRET; processes started "
              "otherwise need the same EMBER_JOB_SECRET or EMBER_JOB_SECRET_FILE: see docs/reliability.md)");
  Digest theirs;
  if (IoStatus s = recv_all(fd, theirs.data(), theirs.size(), deadline); s != IoStatus::kOk) fail_io(s, "with its proof");
  EMBER_CHECK(digests_equal(theirs, proof(secret, "server", ns, nc)), "TcpStore: the store at ", where,
              " accepted this rank but could not prove it holds the job's secret: it is not this job's store (another "
              "job's, or a process posing as one); this rank will not join it. Check MASTER_ADDR and MASTER_PORT");
}

}  // namespace ember::comm
