// Admitting only the job's ranks: the store handshake (Note [Store handshake]) in each
// direction over a socket pair, a TcpStore that refuses a stranger while serving its own
// ranks, the loopback-only store of a one-node job, store waits that end at their
// deadline when rank 0 is stopped, and where the job's secret comes from.
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "base/error.h"
#include "comm/job_secret.h"
#include "comm/rendezvous.h"
#include "comm/sha256.h"
#include "comm/store_auth.h"
#include "comm/tcp_store.h"
#include "tests/comm/process_util.h"

namespace ember::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string kSecret = "the-job-secret-0123456789";

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A connected pair of sockets: [0] the server's end, [1] the client's.
struct SocketPair {
  int fd[2] = {-1, -1};
  SocketPair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd), 0); }
  ~SocketPair() {
    for (int f : fd) ::close(f);
  }
};

// The server's verdict and the client's error (empty: accepted) for one handshake.
std::pair<HandshakeResult, std::string> handshake(const std::string& server_secret, const std::string& client_secret) {
  SocketPair p;
  HandshakeResult verdict = HandshakeResult::kGone;
  std::thread server([&] { verdict = serve_handshake(p.fd[0], server_secret, Clock::now() + 5s); });
  std::string err;
  try {
    client_handshake(p.fd[1], client_secret, Clock::now() + 5s, "peer:1");
  } catch (const Error& e) {
    err = e.what();
  }
  server.join();
  return {verdict, err};
}

TEST(StoreHandshake, SameSecretIsAcceptedBothWays) {
  const auto [verdict, err] = handshake(kSecret, kSecret);
  EXPECT_EQ(verdict, HandshakeResult::kAccepted);
  EXPECT_EQ(err, "");
}

TEST(StoreHandshake, WrongSecretIsRefusedWithAClearError) {
  for (const std::string& wrong : {kSecret + "x", std::string("another-secret-abcdef"), kSecret.substr(1)}) {
    const auto [verdict, err] = handshake(kSecret, wrong);
    EXPECT_EQ(verdict, HandshakeResult::kRefused) << wrong;
    EXPECT_TRUE(has(err, "TcpStore: the store at peer:1 refused this process: it does not hold that job's secret"))
        << err;
    EXPECT_TRUE(has(err, "choose another MASTER_PORT")) << err;
    EXPECT_TRUE(has(err, "EMBER_JOB_SECRET")) << err;
  }
}

// Plays a server by hand: greets, reads the client's answer, then replies with `reply`.
std::string client_error_against(const std::string& greeting, const std::string& reply, bool answer = true) {
  SocketPair p;
  std::thread server([&] {
    send_all(p.fd[0], greeting.data(), greeting.size(), kNoDeadline);
    char answer_bytes[64];
    if (answer && recv_all(p.fd[0], answer_bytes, sizeof answer_bytes, Clock::now() + 5s) == IoStatus::kOk)
      send_all(p.fd[0], reply.data(), reply.size(), kNoDeadline);
  });
  const std::string err = error_of([&] { client_handshake(p.fd[1], kSecret, Clock::now() + 300ms, "peer:1"); });
  server.join();
  return err;
}

// Mutual: a server that accepts anyone but cannot prove the secret is not joined.
TEST(StoreHandshake, ClientRefusesAServerWithoutTheSecret) {
  const std::string nonce(32, '\x07');
  std::string err = client_error_against("ember-store/1\n" + nonce, "Y" + std::string(32, '\0'));
  EXPECT_TRUE(has(err, "accepted this rank but could not prove it holds the job's secret")) << err;
  EXPECT_TRUE(has(err, "this rank will not join it")) << err;
  // Its proof made with another secret does not do either.
  std::string wrong_proof;
  {
    const Digest d = hmac_sha256("another-secret-abcdef", "ember-store/1 server" + nonce);
    wrong_proof.assign(reinterpret_cast<const char*>(d.data()), d.size());
  }
  err = client_error_against("ember-store/1\n" + nonce, "Y" + wrong_proof);
  EXPECT_TRUE(has(err, "could not prove it holds the job's secret")) << err;
  err = client_error_against("HTTP/1.1 400 Bad Request\r\n\r\n" + nonce, "");
  EXPECT_TRUE(has(err, "is not an ember store")) << err;
  err = client_error_against("", "", false);  // says nothing: the deadline ends it
  EXPECT_TRUE(has(err, "did not answer with its greeting before the timeout")) << err;
}

TEST(StoreHandshake, ServerDropsAClientThatSaysNothing) {
  SocketPair p;
  EXPECT_EQ(serve_handshake(p.fd[0], kSecret, Clock::now() + 100ms), HandshakeResult::kGone);
}

TcpStoreOptions opts(const std::string& secret, Duration timeout = 5s) { return {.secret = secret, .timeout = timeout}; }

// A stranger with the port but not the secret is refused; it set nothing, and the
// store goes on serving its own clients.
TEST(TcpStoreAuth, StrangerIsRefusedAndTakesNothing) {
  auto server = TcpStore::serve(0, opts(kSecret));
  for (const std::string& wrong : {std::string("another-secret-abcdef"), kSecret + "!"}) {
    const std::string err = error_of([&] { TcpStore::connect("127.0.0.1", server->port(), opts(wrong)); });
    EXPECT_TRUE(has(err, "refused this process")) << err;
  }
  auto rank1 = TcpStore::connect("127.0.0.1", server->port(), opts(kSecret));
  EXPECT_EQ(rank1->compare_set("rank/1", "", "me"), "me");
  EXPECT_EQ(server->get("rank/1"), "me");
  EXPECT_THROW(TcpStore::serve(0, opts("")), Error);
  EXPECT_THROW(TcpStore::connect("127.0.0.1", server->port(), opts("")), Error);
}

// A non-loopback IPv4 address of this machine, if it has one.
std::optional<in_addr> other_local_address() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return std::nullopt;
  std::optional<in_addr> found;
  for (ifaddrs* i = list; i && !found; i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
      const in_addr a = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr;
      if ((ntohl(a.s_addr) >> 24) != 127) found = a;
    }
  ::freeifaddrs(list);
  return found;
}

bool reachable(in_addr addr, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr = addr;
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// A one-node job's store listens on 127.0.0.1 only; a job on several nodes, everywhere.
TEST(TcpStoreAuth, OneNodeStoreListensOnLoopbackOnly) {
  LaunchInfo one;
  one.world_size = one.local_world_size = 2;
  one.master_addr = "this-name-is-not-resolved";  // one node: its ranks use 127.0.0.1 whatever it says
  one.master_port = free_port();
  one.secret = {kSecret, "test", false};
  one.timeout = 5s;
  auto served = std::dynamic_pointer_cast<TcpStore>(connect_store(one));
  ASSERT_TRUE(served && served->is_server());
  EXPECT_EQ(served->listen_address(), "127.0.0.1");
  one.rank = 1;
  auto client = connect_store(one);
  client->set("k", "v");
  EXPECT_EQ(served->get("k"), "v");
  if (auto other = other_local_address()) {
    EXPECT_FALSE(reachable(*other, served->port())) << "reached through another local address";
  } else {
    std::printf("this machine has no non-loopback IPv4 address: only the bound address was checked\n");
  }

  LaunchInfo several = one;
  several.rank = 0;
  several.local_world_size = 1;
  several.master_port = free_port();
  auto everywhere = std::dynamic_pointer_cast<TcpStore>(connect_store(several));
  const std::string addr = everywhere->listen_address();
  EXPECT_TRUE(addr == "::" || addr == "0.0.0.0") << addr;
}

// Worker: serves a store on MASTER_PORT with EMBER_JOB_SECRET until killed.
TEST(TcpStoreStopped, Worker) {
  if (!testing::is_worker()) GTEST_SKIP() << "runs as a child of TcpStoreStopped.WaitsEndAtTheirDeadline";
  auto server = TcpStore::serve(std::atoi(std::getenv("MASTER_PORT")), opts(std::getenv("EMBER_JOB_SECRET"), 60s));
  server->set("ready", "1");
  std::this_thread::sleep_for(120s);
}

// Rank 0 stopped (SIGSTOP: its sockets stay open, nobody answers): a wait, a request and
// a new connection each end at their deadline with an error saying so, where a blocking
// read would wait forever.
TEST(TcpStoreStopped, WaitsEndAtTheirDeadline) {
  const int port = free_port();
  const std::string secret = random_secret();
  const pid_t pid = testing::spawn_self("TcpStoreStopped.Worker",
                                        {"MASTER_PORT=" + std::to_string(port), "EMBER_JOB_SECRET=" + secret});
  ASSERT_GT(pid, 0);
  auto client = TcpStore::connect("127.0.0.1", port, opts(secret, 30s));
  client->wait({"ready"});
  auto job = std::make_shared<PrefixStore>("job/0", client);  // as the DDP constructor's store is
  client->set_timeout(2s);
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  std::string err = error_of([&] { job->wait({"ddp/model/1"}, 300ms); });
  EXPECT_TRUE(has(err, "TcpStore: the store at 127.0.0.1:" + std::to_string(port) + " gave no answer in time")) << err;
  EXPECT_TRUE(has(err, "is rank 0 stopped")) << err;
  err = error_of([&] { client->set("x", "1"); });  // the unanswered connection is not reused
  EXPECT_TRUE(has(err, "was closed after a request went unanswered")) << err;
  err = error_of([&] { TcpStore::connect("127.0.0.1", port, opts(secret, 300ms)); });
  EXPECT_TRUE(has(err, "did not answer with its greeting before the timeout")) << err;
  ::kill(pid, SIGKILL);
  ::kill(pid, SIGCONT);
  testing::wait_all({pid});
}

// ----- where the secret comes from -----

EnvLookup env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const std::string& n) -> std::optional<std::string> {
    auto it = vars.find(n);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

LaunchInfo info_of(std::map<std::string, std::string> vars) { return launch_info_from_env(env_of(vars)); }

TEST(JobSecret, RandomSecretsDiffer) {
  const std::string a = random_secret(), b = random_secret();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_NE(a, b);
}

TEST(JobSecret, UserGivenComesFirst) {
  const auto s = user_job_secret(env_of({{"EMBER_JOB_SECRET", kSecret}, {"SLURM_JOB_ID", "5"}}));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->value, kSecret);
  EXPECT_FALSE(s->derived);
  EXPECT_EQ(info_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"EMBER_JOB_SECRET", kSecret}, {"SLURM_JOB_ID", "5"}})
                .secret.value,
            kSecret);
  const std::string err = error_of([] { user_job_secret(env_of({{"EMBER_JOB_SECRET", "short"}})); });
  EXPECT_TRUE(has(err, "EMBER_JOB_SECRET holds 5 characters; a job secret needs at least 16")) << err;
}

TEST(JobSecret, FileMustBeThisUsersAndPrivate) {
  const auto dir = std::filesystem::temp_directory_path() / ("ember_secret_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "secret").string();
  std::ofstream(path) << kSecret << "\n";
  auto read = [&] { return user_job_secret(env_of({{"EMBER_JOB_SECRET_FILE", path}})); };
  for (mode_t mode : {0644, 0640, 0604, 0620}) {
    ::chmod(path.c_str(), mode);
    const std::string err = error_of([&] { read(); });
    EXPECT_TRUE(has(err, "lets other users read or change it: chmod 600")) << std::oct << mode << ": " << err;
  }
  ::chmod(path.c_str(), 0600);
  EXPECT_EQ(read()->value, kSecret);  // the final newline is not part of it
  ::chmod(path.c_str(), 0400);
  EXPECT_EQ(read()->source, "EMBER_JOB_SECRET_FILE");
  std::string err = error_of([&] { user_job_secret(env_of({{"EMBER_JOB_SECRET_FILE", path + ".missing"}})); });
  EXPECT_TRUE(has(err, "cannot open EMBER_JOB_SECRET_FILE=")) << err;
  err = error_of([&] { user_job_secret(env_of({{"EMBER_JOB_SECRET_FILE", dir.string()}})); });
  EXPECT_TRUE(has(err, "it is not a regular file")) << err;
  ::chmod(path.c_str(), 0600);
  std::ofstream(path) << "short\n";
  err = error_of([&] { read(); });
  EXPECT_TRUE(has(err, "holds 5 characters")) << err;
  std::filesystem::remove_all(dir);
}

TEST(JobSecret, DerivedFromTheSchedulersIds) {
  const auto slurm = scheduler_job_secret(env_of({{"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "1"}}));
  ASSERT_TRUE(slurm);
  EXPECT_TRUE(slurm->derived);
  EXPECT_EQ(slurm->source, "derived from SLURM_JOB_ID and SLURM_STEP_ID");
  EXPECT_NE(slurm->value, scheduler_job_secret(env_of({{"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "2"}}))->value);
  EXPECT_NE(slurm->value, scheduler_job_secret(env_of({{"SLURM_JOB_ID", "78"}, {"SLURM_STEP_ID", "1"}}))->value);
  for (const char* name : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid"}) {
    const auto mpi = scheduler_job_secret(env_of({{name, "prterun-n1-123@1"}}));
    ASSERT_TRUE(mpi) << name;
    EXPECT_EQ(mpi->source, std::string("derived from ") + name);
  }
  // mpirun inside a Slurm allocation: OpenMPI's id, the same in all its processes.
  const std::map<std::string, std::string> both = {{"SLURM_JOB_ID", "77"}, {"OMPI_MCA_orte_ess_jobid", "42"}};
  EXPECT_EQ(scheduler_job_secret(env_of(both), true)->source, "derived from OMPI_MCA_orte_ess_jobid");
  EXPECT_EQ(scheduler_job_secret(env_of(both), false)->source, "derived from SLURM_JOB_ID");
  EXPECT_FALSE(scheduler_job_secret(env_of({})));
}

// On one node without a launcher's secret: this user's id and the job id (accidents only);
// on several nodes without any: an error saying what to set.
TEST(JobSecret, RanksWithoutALauncher) {
  const LaunchInfo a = info_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"EMBER_RUN_ID", "a"}});
  EXPECT_TRUE(a.secret.derived);
  EXPECT_TRUE(has(a.secret.source, "user's id and the job id 'a'")) << a.secret.source;
  EXPECT_NE(a.secret.value, info_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"EMBER_RUN_ID", "b"}}).secret.value);
  EXPECT_TRUE(info_of({}).secret.value.empty());  // one process: no store
  const std::map<std::string, std::string> two_nodes = {
      {"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "node0"}};
  const std::string err = error_of([&] { info_of(two_nodes); });
  EXPECT_TRUE(has(err, "the 4 ranks span several nodes (2 on this one), and no secret admits them")) << err;
  EXPECT_TRUE(has(err, "set EMBER_JOB_SECRET")) << err;
  EXPECT_TRUE(has(err, "EMBER_JOB_SECRET_FILE")) << err;
  EXPECT_TRUE(has(err, "Slurm (srun) or OpenMPI (mpirun)")) << err;
  auto slurm = two_nodes;
  slurm["SLURM_JOB_ID"] = "77";
  EXPECT_EQ(info_of(slurm).secret.source, "derived from SLURM_JOB_ID");
}

}  // namespace
}  // namespace ember::comm
