// The emulated NCCL: the NCCL API a ProcessGroup backend calls (communicators, groups,
// all-reduce, broadcast, reduce, all-gather, reduce-scatter), defined under nccl.h's own
// declarations for the emulated devices of the EMBER_CUDA=EMULATED build, which links no
// libnccl. kernels/emu/README.md ("The emulated NCCL") says what it models and what not.
//
// Policy, as the backend relies on it:
// - Ranks are threads of one process or processes of one machine alike: a communicator is
//   a POSIX shared-memory segment named by the unique id, holding lock-free counters and one
//   fixed-size slot per rank. Every rank maps it; the last to arrive unlinks it, so a job
//   that dies later leaves nothing in /dev/shm.
// - A collective is checked at once (bad arguments: ncclInvalidArgument with a message for
//   ncclGetLastError) and then queued on its stream (emu::enqueue): it runs in stream order
//   on the stream's worker and holds it until the peers arrive, as an NCCL kernel holds
//   its stream. Data moves through the slots chunk by chunk, one barrier after the ranks
//   have filled their slots and one after they have read them. Every rank reduces all
//   slots itself, in rank order, so all ranks end with bitwise the same result; 16-bit
//   floats are combined in float.
// - Waiting yields a few times, then sleeps on a futex in the segment (woken by every
//   arrival), and gives up only when the communicator is aborted: there is no timeout, as
//   a real NCCL hangs until aborted. ncclCommAbort releases the waiting work (the stream
//   goes on; the outputs are left as they were), marks the segment so the peers' waits end
//   too (ncclRemoteError there), and every later collective of the comm is skipped.
#include <fcntl.h>
#include <linux/futex.h>
#include <nccl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "kernels/emu/runtime.h"

namespace {

constexpr uint32_t kIdMagic = 0x454d4e43;             // "EMNC": an id made by ncclGetUniqueId
constexpr size_t kDefaultSlotBytes = size_t(4) << 20;  // per rank; EMBER_EMU_NCCL_SLOT_BYTES
constexpr int kMaxRanks = 64;                          // as many as emulated devices

// What the 128 bytes of an ncclUniqueId hold.
struct IdLayout {
  uint32_t magic;
  uint32_t slot_bytes;  // fixed by whoever made the id, so every rank agrees
  char name[64];        // of the shared-memory segment
};
static_assert(sizeof(IdLayout) <= sizeof(ncclUniqueId));

// The start of the segment; the rest is laid out by Layout. Zero-filled when created.
struct Header {
  alignas(64) std::atomic<uint32_t> wake;  // futex word: bumped by every arrival and abort
  alignas(64) std::atomic<uint32_t> attached;
  std::atomic<int32_t> nranks;
  std::atomic<uint32_t> aborted;  // some rank called ncclCommAbort
};
static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free);

struct alignas(64) Counter {
  std::atomic<uint64_t> value;  // the last barrier this rank reached
};

struct Layout {
  size_t devices, counters, slots, total;
  Layout(int nranks, size_t slot_bytes) {
    const auto n = static_cast<size_t>(nranks);
    devices = 256;
    counters = devices + (n * sizeof(int32_t) + 63) / 64 * 64;
    slots = (counters + n * sizeof(Counter) + 4095) / 4096 * 4096;
    total = slots + n * slot_bytes;
  }
};

thread_local std::string last_error;

ncclResult_t fail(ncclResult_t result, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
ncclResult_t fail(ncclResult_t result, const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  last_error = buf;
  return result;
}

void futex_wake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// Sleeps while *word == seen (or a spurious wake-up, or 100 ms: a poll, never a timeout).
void futex_wait(std::atomic<uint32_t>* word, uint32_t seen) {
  const timespec poll{0, 100'000'000};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &poll, nullptr, 0);
}

// One rank's view of a communicator: its mapping of the segment, and what it knows.
struct State {
  int nranks = 0, rank = 0, device = 0;
  size_t slot_bytes = 0;
  char* base = nullptr;
  size_t mapped = 0;
  Header* header = nullptr;
  std::atomic<int32_t>* devices = nullptr;  // physical device + 1 of each rank; 0 until it arrives
  Counter* counters = nullptr;
  char* slots = nullptr;

  uint64_t barriers = 0;  // reached so far; touched only by the work (ordered, as NCCL requires)
  std::atomic<bool> aborted{false};
  std::atomic<int> error{ncclSuccess};  // the asynchronous error
  std::mutex message_mu;
  std::string message;                 // what error says
  std::atomic<int> pending{0}, running{0};  // collectives queued and not done; running now

  ~State() {
    if (base) munmap(base, mapped);
  }

  char* slot(int r) const { return slots + static_cast<size_t>(r) * slot_bytes; }
  bool broken() const { return aborted.load() || header->aborted.load() != 0 || error.load() != ncclSuccess; }

  void set_error(ncclResult_t e, std::string what) {
    std::lock_guard lock(message_mu);
    if (error.load() != ncclSuccess) return;
    message = std::move(what);
    error = e;
  }

  // A collective found the comm aborted, here or by a peer: the error it reports.
  void note_abort(const char* fn) {
    if (aborted.load())
      set_error(ncclSystemError, std::string(fn) + ": the communicator was aborted (ncclCommAbort) on rank " +
                                     std::to_string(rank) + " while it waited for its peers");
    else if (header->aborted.load())
      set_error(ncclRemoteError, std::string(fn) + ": a peer aborted the communicator (ncclCommAbort); rank " +
                                     std::to_string(rank) + " cannot complete it");
  }

  void arrive() {
    header->wake.fetch_add(1, std::memory_order_acq_rel);
    futex_wake(&header->wake);
  }

  // Waits until done() holds; false when the communicator is aborted first.
  template <class Done>
  bool wait(Done done, bool abortable = true) {
    for (int round = 0;; ++round) {
      const uint32_t seen = header->wake.load(std::memory_order_acquire);
      if (done()) return true;
      if (abortable && (aborted.load() || header->aborted.load() != 0)) return false;
      if (round < 16) std::this_thread::yield();
      else futex_wait(&header->wake, seen);
    }
  }

  // Every rank has reached this barrier (false: aborted).
  bool barrier() {
    const uint64_t k = ++barriers;
    counters[rank].value.store(k, std::memory_order_release);
    arrive();
    return wait([&] {
      for (int r = 0; r < nranks; ++r)
        if (counters[r].value.load(std::memory_order_acquire) < k) return false;
      return true;
    });
  }
};

}  // namespace

// The handle nccl.h leaves opaque. ncclCommAbort frees the state but leaves the handle
// (a few bytes), so that ncclCommGetAsyncError can still say that the comm was aborted;
// the state is atomic because a watchdog thread may abort while another thread calls.
struct ncclComm {
  std::atomic<std::shared_ptr<State>> state;  // null until init completes (a grouped init: at ncclGroupEnd)
  int nranks = 0, rank = 0, device = 0;
  std::atomic<bool> aborted{false};
};

namespace {

// ---- Arithmetic: the values combined in ComputeT (float for the 16-bit floats).

template <class T>
struct Compute {
  using type = T;
  static T in(T v) { return v; }
  static T out(T v) { return v; }
};
template <>
struct Compute<ember::Half> {
  using type = float;
  static float in(ember::Half v) { return float(v); }
  static ember::Half out(float v) { return ember::Half(v); }
};
template <>
struct Compute<ember::BFloat16> {
  using type = float;
  static float in(ember::BFloat16 v) { return float(v); }
  static ember::BFloat16 out(float v) { return ember::BFloat16(v); }
};

template <class A>
A combine(A a, A b, ncclRedOp_t op) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;  // wraps as the device's integers do, without UB
    switch (op) {
      case ncclProd: return static_cast<A>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
      case ncclMax: return std::max(a, b);
      case ncclMin: return std::min(a, b);
      default: return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));  // sum, avg
    }
  } else {
    switch (op) {
      case ncclProd: return a * b;
      case ncclMax: return std::fmax(a, b);
      case ncclMin: return std::fmin(a, b);
      default: return a + b;
    }
  }
}

// dst[i] = src[0][i] op src[1][i] op ... (in rank order), for i < count; /n for ncclAvg.
template <class T>
void reduce_typed(void* dst, const char* const* src, int n, size_t count, ncclRedOp_t op) {
  using C = Compute<T>;
  using A = typename C::type;
  auto load = [](const char* p, size_t i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    return C::in(v);
  };
  for (size_t i = 0; i < count; ++i) {
    A acc = load(src[0], i);
    for (int r = 1; r < n; ++r) acc = combine<A>(acc, load(src[r], i), op);
    if (op == ncclAvg) acc = static_cast<A>(acc / static_cast<A>(n));
    const T v = C::out(acc);
    std::memcpy(static_cast<char*>(dst) + i * sizeof(T), &v, sizeof(T));
  }
}

using ReduceFn = void (*)(void*, const char* const*, int, size_t, ncclRedOp_t);

// The element size and the reduction of a data type; {0, nullptr} for one not supported.
struct TypeInfo {
  size_t size;
  ReduceFn reduce;
};
TypeInfo type_info(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return {1, reduce_typed<int8_t>};
    case ncclUint8: return {1, reduce_typed<uint8_t>};
    case ncclInt32: return {4, reduce_typed<int32_t>};
    case ncclUint32: return {4, reduce_typed<uint32_t>};
    case ncclInt64: return {8, reduce_typed<int64_t>};
    case ncclUint64: return {8, reduce_typed<uint64_t>};
    case ncclFloat16: return {2, reduce_typed<ember::Half>};
    case ncclFloat32: return {4, reduce_typed<float>};
    case ncclFloat64: return {8, reduce_typed<double>};
    case ncclBfloat16: return {2, reduce_typed<ember::BFloat16>};
    default: return {0, nullptr};
  }
}

// ---- Groups: inits made between ncclGroupStart and ncclGroupEnd complete together.

thread_local int group_depth = 0;
thread_local std::vector<std::function<ncclResult_t()>> grouped_inits;

// ---- Communicators.

ncclResult_t init_rank(ncclComm* comm, const IdLayout& id) {
  const int nranks = comm->nranks, rank = comm->rank;
  const int physical = ember::emu::physical_device(comm->device);
  if (physical < 0)
    return fail(ncclUnhandledCudaError, "ncclCommInitRank: CUDA device %d does not exist", comm->device);
  const Layout layout(nranks, id.slot_bytes);
  const int fd = shm_open(id.name, O_CREAT | O_RDWR, 0600);
  if (fd < 0) return fail(ncclSystemError, "ncclCommInitRank: shm_open(%s): %s", id.name, std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || (st.st_size != 0 && static_cast<size_t>(st.st_size) != layout.total) ||
      ftruncate(fd, static_cast<off_t>(layout.total)) != 0) {
    close(fd);
    return fail(ncclInvalidArgument, "ncclCommInitRank: the ranks of %s disagree on nranks (%d here)", id.name, nranks);
  }
  void* base = mmap(nullptr, layout.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return fail(ncclSystemError, "ncclCommInitRank: mmap: %s", std::strerror(errno));

  auto s = std::make_shared<State>();
  s->nranks = nranks;
  s->rank = rank;
  s->device = comm->device;
  s->slot_bytes = id.slot_bytes;
  s->base = static_cast<char*>(base);
  s->mapped = layout.total;
  s->header = reinterpret_cast<Header*>(s->base);
  s->devices = reinterpret_cast<std::atomic<int32_t>*>(s->base + layout.devices);
  s->counters = reinterpret_cast<Counter*>(s->base + layout.counters);
  s->slots = s->base + layout.slots;

  int32_t expected = 0;
  if (!s->header->nranks.compare_exchange_strong(expected, nranks) && expected != nranks)
    return fail(ncclInvalidArgument, "ncclCommInitRank: nranks %d, but another rank of this id gave %d", nranks, expected);
  expected = 0;
  if (!s->devices[rank].compare_exchange_strong(expected, physical + 1))
    return fail(ncclInvalidArgument, "ncclCommInitRank: rank %d of %d joined twice", rank, nranks);
  if (s->header->attached.fetch_add(1) + 1 == static_cast<uint32_t>(nranks)) shm_unlink(id.name);
  s->arrive();
  // As a real NCCL, init waits for every rank, however long.
  s->wait([&] { return s->header->attached.load() >= static_cast<uint32_t>(nranks); }, false);
  for (int r = 0; r < nranks; ++r)
    if (r != rank && s->devices[r].load() == physical + 1)
      return fail(ncclInvalidUsage,
                  "Duplicate GPU detected : rank %d and rank %d both on CUDA device %d (emulated device %d)",
                  rank, r, comm->device, physical);
  comm->state.store(std::move(s));
  return ncclSuccess;
}

// The comm's state, or null after an error saying why there is none.
std::shared_ptr<State> comm_state(const ncclComm* comm, const char* fn) {
  std::shared_ptr<State> s;
  if (!comm)
    fail(ncclInvalidArgument, "%s: comm is NULL", fn);
  else if (comm->aborted.load())
    fail(ncclInvalidUsage, "%s: the communicator was aborted (ncclCommAbort)", fn);
  else if (!(s = comm->state.load()))
    fail(ncclInvalidUsage, "%s: the communicator is not initialized (a grouped init completes at ncclGroupEnd)", fn);
  return s;
}

// Waits for the comm's queued collectives to finish (or be skipped).
void wait_pending(State& s) {
  while (s.pending.load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
}

// ---- Collectives.

// Checks that [ptr, ptr + bytes) is device memory of the comm's device.
ncclResult_t check_buffer(const ncclComm* comm, const void* ptr, size_t bytes, const char* fn, const char* name) {
  if (!ptr) return fail(ncclInvalidArgument, "%s: %s is NULL", fn, name);
  const int device = ember::emu::pointer_device(ptr, bytes);
  if (device != comm->device)
    return fail(ncclInvalidArgument, "%s: %s (%p, %zu bytes) is not memory of CUDA device %d%s", fn, name, ptr, bytes,
                comm->device, device < 0 ? "" : " (it is another device's)");
  return ncclSuccess;
}

struct Call {
  const char* fn;
  const void* send;
  void* recv;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;  // -1 for the collectives without one
};

// The body of one collective, run by the stream's worker; false when aborted.
using Body = bool (*)(State&, const Call&, const TypeInfo&);

bool run_all_reduce(State& s, const Call& c, const TypeInfo& t) {
  const size_t per_chunk = s.slot_bytes / t.size;
  std::vector<const char*> src(static_cast<size_t>(s.nranks));
  for (size_t done = 0; done < c.count; done += per_chunk) {
    const size_t n = std::min(per_chunk, c.count - done);
    std::memcpy(s.slot(s.rank), static_cast<const char*>(c.send) + done * t.size, n * t.size);
    if (!s.barrier()) return false;
    const bool mine = c.root < 0 || c.root == s.rank;  // ncclReduce: only the root's output
    if (mine) {
      for (int r = 0; r < s.nranks; ++r) src[static_cast<size_t>(r)] = s.slot(r);
      t.reduce(static_cast<char*>(c.recv) + done * t.size, src.data(), s.nranks, n, c.op);
    }
    if (!s.barrier()) return false;
  }
  return true;
}

bool run_broadcast(State& s, const Call& c, const TypeInfo& t) {
  const size_t per_chunk = s.slot_bytes / t.size;
  for (size_t done = 0; done < c.count; done += per_chunk) {
    const size_t bytes = std::min(per_chunk, c.count - done) * t.size;
    if (s.rank == c.root) std::memcpy(s.slot(c.root), static_cast<const char*>(c.send) + done * t.size, bytes);
    if (!s.barrier()) return false;
    std::memcpy(static_cast<char*>(c.recv) + done * t.size, s.slot(c.root), bytes);
    if (!s.barrier()) return false;
  }
  return true;
}

// count is the count each rank sends; rank r's part lands at recv + r * count.
bool run_all_gather(State& s, const Call& c, const TypeInfo& t) {
  const size_t per_chunk = s.slot_bytes / t.size;
  for (size_t done = 0; done < c.count; done += per_chunk) {
    const size_t bytes = std::min(per_chunk, c.count - done) * t.size;
    std::memcpy(s.slot(s.rank), static_cast<const char*>(c.send) + done * t.size, bytes);
    if (!s.barrier()) return false;
    for (int r = 0; r < s.nranks; ++r)
      std::memcpy(static_cast<char*>(c.recv) + (static_cast<size_t>(r) * c.count + done) * t.size, s.slot(r), bytes);
    if (!s.barrier()) return false;
  }
  return true;
}

// count is the count each rank receives: part r of every rank's send, reduced.
bool run_reduce_scatter(State& s, const Call& c, const TypeInfo& t) {
  const auto ranks = static_cast<size_t>(s.nranks);
  const size_t per_chunk = s.slot_bytes / (t.size * ranks);
  std::vector<const char*> src(ranks);
  for (size_t done = 0; done < c.count; done += per_chunk) {
    const size_t n = std::min(per_chunk, c.count - done), bytes = n * t.size;
    for (size_t part = 0; part < ranks; ++part)  // the slot holds this chunk of every part
      std::memcpy(s.slot(s.rank) + part * bytes, static_cast<const char*>(c.send) + (part * c.count + done) * t.size, bytes);
    if (!s.barrier()) return false;
    for (int r = 0; r < s.nranks; ++r) src[static_cast<size_t>(r)] = s.slot(r) + static_cast<size_t>(s.rank) * bytes;
    t.reduce(static_cast<char*>(c.recv) + done * t.size, src.data(), s.nranks, n, c.op);
    if (!s.barrier()) return false;
  }
  return true;
}

// Checks a collective's arguments, then queues it on the stream. send_count / recv_count:
// the elements of sendbuff and recvbuff (0: that buffer is not used by this rank).
ncclResult_t submit(ncclComm* comm, const Call& c, size_t send_count, size_t recv_count, bool reduces, bool rooted,
                    cudaStream_t stream, Body body) {
  std::shared_ptr<State> state = comm_state(comm, c.fn);
  if (!state) return comm ? ncclInvalidUsage : ncclInvalidArgument;
  const TypeInfo t = type_info(c.type);
  if (!t.size) return fail(ncclInvalidArgument, "%s: data type %d is not supported", c.fn, static_cast<int>(c.type));
  if (reduces && (c.op < ncclSum || c.op > ncclAvg))
    return fail(ncclInvalidArgument, "%s: reduction %d is not one of sum, prod, max, min, avg", c.fn, static_cast<int>(c.op));
  if (rooted && (c.root < 0 || c.root >= comm->nranks))
    return fail(ncclInvalidArgument, "%s: root %d is not a rank of %d", c.fn, c.root, comm->nranks);
  if (c.count == 0) return ncclSuccess;  // nothing to move, so no peers to meet
  if (send_count)
    if (const ncclResult_t e = check_buffer(comm, c.send, send_count * t.size, c.fn, "sendbuff")) return e;
  if (recv_count)
    if (const ncclResult_t e = check_buffer(comm, c.recv, recv_count * t.size, c.fn, "recvbuff")) return e;
  // Counts as pending until the queued work is destroyed: after it ran, or unrun, when
  // the device has failed (a failed device's worker drops its queue).
  struct Pending {
    std::shared_ptr<State> state;
    explicit Pending(std::shared_ptr<State> s) : state(std::move(s)) { ++state->pending; }
    ~Pending() { --state->pending; }
  };
  auto pending = std::make_shared<Pending>(std::move(state));
  try {
    ember::emu::enqueue(stream, [pending, c, t, body] {
      State& s = *pending->state;
      bool ok = !s.broken();  // an aborted or failed comm runs nothing more
      if (ok) {
        ++s.running;
        ok = body(s, c, t);
        --s.running;
      }
      if (!ok) s.note_abort(c.fn);
    });
  } catch (const std::exception& e) {  // the device has failed (a sticky CUDA error)
    return fail(ncclUnhandledCudaError, "%s: %s", c.fn, e.what());
  }
  return ncclSuccess;
}

std::string make_segment_name() {
  std::random_device rd;
  char name[64];
  std::snprintf(name, sizeof name, "/ember-nccl-%d-%08x%08x", static_cast<int>(getpid()), rd(), rd());
  return name;
}

}  // namespace

// ---- The API.

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  if (!unique_id) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  IdLayout id{};
  id.magic = kIdMagic;
  size_t slot = kDefaultSlotBytes;
  if (const char* env = std::getenv("EMBER_EMU_NCCL_SLOT_BYTES")) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(env, &end, 10);
    if (end == env || *end != '\0' || v < 4096 || v > (1ull << 30))
      return fail(ncclInvalidArgument, "EMBER_EMU_NCCL_SLOT_BYTES must be a byte count in [4096, 2^30], not '%s'", env);
    slot = static_cast<size_t>(v) / 64 * 64;
  }
  id.slot_bytes = static_cast<uint32_t>(slot);
  const std::string name = make_segment_name();
  std::snprintf(id.name, sizeof id.name, "%s", name.c_str());
  std::memset(unique_id, 0, sizeof *unique_id);
  std::memcpy(unique_id->internal, &id, sizeof id);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank, ncclConfig_t* config) {
  const char* fn = "ncclCommInitRank";
  if (!comm) return fail(ncclInvalidArgument, "%s: comm is NULL", fn);
  *comm = nullptr;
  if (nranks < 1 || nranks > kMaxRanks)
    return fail(ncclInvalidArgument, "%s: nranks %d is not in [1, %d] (the emulated devices)", fn, nranks, kMaxRanks);
  if (rank < 0 || rank >= nranks) return fail(ncclInvalidArgument, "%s: rank %d is not in [0, %d)", fn, rank, nranks);
  if (config && config->magic != 0xcafebeef)
    return fail(ncclInvalidArgument, "%s: config was not set from NCCL_CONFIG_INITIALIZER", fn);
  IdLayout id;
  std::memcpy(&id, comm_id.internal, sizeof id);
  if (id.magic != kIdMagic || id.slot_bytes < 4096 || id.name[0] != '/' || !std::memchr(id.name, '\0', sizeof id.name))
    return fail(ncclInvalidArgument, "%s: commId was not made by ncclGetUniqueId", fn);
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return fail(ncclUnhandledCudaError, "%s: cudaGetDevice failed", fn);
  // Non-blocking configs (blocking = 0) are served as blocking ones: every call completes
  // before it returns, which a non-blocking caller accepts (ncclSuccess, never ncclInProgress).
  auto handle = std::make_unique<ncclComm>();
  handle->nranks = nranks;
  handle->rank = rank;
  handle->device = device;
  if (group_depth > 0) {  // completed by ncclGroupEnd, with the group's other inits
    ncclComm* c = handle.get();
    grouped_inits.push_back([c, id] {
      cudaSetDevice(c->device);
      return init_rank(c, id);
    });
    *comm = handle.release();
    return ncclSuccess;
  }
  if (const ncclResult_t e = init_rank(handle.get(), id)) return e;
  *comm = handle.release();
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, comm_id, rank, nullptr);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  std::shared_ptr<State> s = comm_state(comm, "ncclCommFinalize");
  if (!s) return comm ? ncclInvalidUsage : ncclInvalidArgument;
  wait_pending(*s);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  if (comm->aborted.load())  // a real NCCL has freed it: this would be a double free
    return fail(ncclInvalidUsage, "ncclCommDestroy: the communicator was aborted, which freed it (ncclCommAbort)");
  if (std::shared_ptr<State> s = comm->state.load()) wait_pending(*s);  // its work still runs on the streams
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm || comm->aborted.exchange(true)) return ncclSuccess;
  if (std::shared_ptr<State> s = comm->state.load()) {
    s->aborted = true;
    s->header->aborted.store(1);
    s->arrive();
    while (s->running.load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
    // Queued work not yet started holds the state and skips itself when its turn comes.
  }
  comm->state.store(nullptr);
  // The handle is kept for ncclCommGetAsyncError, never freed: held here, so that leak
  // checkers see it as reachable.
  static auto* aborted_handles = new std::vector<ncclComm*>;
  static std::mutex mu;
  std::lock_guard lock(mu);
  aborted_handles->push_back(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (!comm || !async_error) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: comm or asyncError is NULL");
  if (comm->aborted.load()) {
    *async_error = ncclSystemError;
    return ncclSuccess;
  }
  *async_error = ncclSuccess;
  if (std::shared_ptr<State> s = comm->state.load()) {
    if (s->header->aborted.load() && s->error.load() == ncclSuccess) s->note_abort("ncclCommGetAsyncError");
    *async_error = static_cast<ncclResult_t>(s->error.load());
  }
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!comm || !count) return fail(ncclInvalidArgument, "ncclCommCount: comm or count is NULL");
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!comm || !rank) return fail(ncclInvalidArgument, "ncclCommUserRank: comm or rank is NULL");
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (!comm || !device) return fail(ncclInvalidArgument, "ncclCommCuDevice: comm or device is NULL");
  *device = comm->device;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

// The calling thread's last failed call; for a comm whose queued work failed, that.
const char* ncclGetLastError(ncclComm_t comm) {
  if (std::shared_ptr<State> s = comm ? comm->state.load() : nullptr; s && s->error.load() != ncclSuccess) {
    std::lock_guard lock(s->message_mu);
    last_error = s->message;
  }
  return last_error.c_str();
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd: no ncclGroupStart before it");
  if (--group_depth > 0) return ncclSuccess;
  // Collectives were queued as they were called; grouped inits meet their peers now, each
  // on a thread of its own, as one thread may init several ranks in one group.
  std::vector<std::function<ncclResult_t()>> inits;
  inits.swap(grouped_inits);
  if (inits.empty()) return ncclSuccess;
  std::vector<ncclResult_t> results(inits.size(), ncclSuccess);
  std::vector<std::string> messages(inits.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < inits.size(); ++i)
    threads.emplace_back([&, i] {
      results[i] = inits[i]();
      messages[i] = last_error;
    });
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < inits.size(); ++i)
    if (results[i] != ncclSuccess) {
      last_error = messages[i];
      return results[i];
    }
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  const Call c{"ncclAllReduce", sendbuff, recvbuff, count, datatype, op, -1};
  return submit(comm, c, count, count, true, false, stream, run_all_reduce);
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  const Call c{"ncclReduce", sendbuff, recvbuff, count, datatype, op, root};
  const bool is_root = comm && root == comm->rank;
  return submit(comm, c, count, is_root ? count : 0, true, true, stream, run_all_reduce);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  const Call c{"ncclBroadcast", sendbuff, recvbuff, count, datatype, ncclSum, root};
  const bool is_root = comm && root == comm->rank;
  return submit(comm, c, is_root ? count : 0, count, false, true, stream, run_broadcast);
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  const Call c{"ncclAllGather", sendbuff, recvbuff, sendcount, datatype, ncclSum, -1};
  const size_t ranks = comm ? static_cast<size_t>(comm->nranks) : 0;
  return submit(comm, c, sendcount, sendcount * ranks, false, false, stream, run_all_gather);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const Call c{"ncclReduceScatter", sendbuff, recvbuff, recvcount, datatype, op, -1};
  const size_t ranks = comm ? static_cast<size_t>(comm->nranks) : 0;
  return submit(comm, c, recvcount * ranks, recvcount, true, false, stream, run_reduce_scatter);
}
