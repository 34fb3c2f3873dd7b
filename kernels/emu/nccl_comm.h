// The emulated NCCL's communicator (kernels/emu/README.md, "The emulated NCCL"), internal
// to kernels/emu: what a unique id holds, the shared-memory segment every rank of a
// communicator maps (a header, the ranks' devices and barrier counters, one slot per
// rank), one rank's view of it (State: barriers, waits, abort, the asynchronous error),
// and init. nccl.cpp defines the API over it; nccl_collectives.cpp moves the data.
#pragma once

#include <nccl.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace ember::emu::nccl {

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

// The start of the segment; the rest is laid out by Layout (nccl_comm.cpp). Zero-filled
// when created.
struct Header {
  alignas(64) std::atomic<uint32_t> wake;  // futex word: bumped by every arrival and abort
  alignas(64) std::atomic<uint32_t> attached;
  std::atomic<int32_t> nranks;
  std::atomic<uint32_t> aborted;    // some rank called ncclCommAbort
  std::atomic<uint32_t> connected;  // ranks whose first collective has come (lazy connection)
};
static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free);

struct alignas(64) Counter {
  std::atomic<uint64_t> value;  // the last barrier this rank reached
};

// Records the message ncclGetLastError gives this thread; returns `result`.
ncclResult_t fail(ncclResult_t result, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
std::string& last_error();  // this thread's

// A new unique id: a random segment name, and the slot size from EMBER_EMU_NCCL_SLOT_BYTES.
ncclResult_t make_id(ncclUniqueId* out);

// Sleeps while *word == seen (or until a spurious wake-up, or 100 ms: a poll, never a timeout).
void futex_wait(std::atomic<uint32_t>* word, uint32_t seen);

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
  std::string message;                      // what error says
  std::atomic<int> pending{0}, running{0};  // collectives queued and not done; running now

  ~State();

  char* slot(int r) const { return slots + static_cast<size_t>(r) * slot_bytes; }
  bool broken() const { return aborted.load() || header->aborted.load() != 0 || error.load() != ncclSuccess; }
  void set_error(ncclResult_t e, std::string what);
  // A collective found the comm aborted, here or by a peer: the error it reports.
  void note_abort(const char* fn);
  // Bumps the futex word and wakes every waiter (this rank arrived somewhere, or aborted).
  void arrive();

  // Waits until done() holds: yields a few times, then sleeps on the futex word; false
  // when the communicator is aborted first (unless not abortable: init).
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
  bool barrier();

  // Lazy connection, as NCCL >= 2.22 does by default (NCCL_RUNTIME_CONNECT=1): a rank's
  // first collective connects it to its peers on the host, which waits until every rank's
  // first collective has come (false: aborted first). Called once per rank.
  bool connect();
};

// Init: maps the segment of `id` as `rank` of `nranks` on CUDA device `device`, waits for
// every rank (as NCCL does, however long: until `cancel` is set, by ncclCommAbort of a
// non-blocking init), unlinks the segment once all have arrived (or on cancel), and fails
// two ranks on one physical device (ncclInvalidUsage, "Duplicate GPU detected").
ncclResult_t attach(const IdLayout& id, int nranks, int rank, int device, const std::atomic<bool>& cancel,
                    std::shared_ptr<State>* out);

}  // namespace ember::emu::nccl
