// The emulated NCCL's communicator (nccl_comm.h): the shared-memory segment, barriers,
// and init.
#include "kernels/emu/nccl_comm.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "kernels/emu/runtime.h"

namespace ember::emu::nccl {
namespace {

// Where the parts of a segment for nranks ranks lie.
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

void futex_wake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace

std::string& last_error() {
  thread_local std::string message;
  return message;
}

ncclResult_t fail(ncclResult_t result, const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  last_error() = buf;
  return result;
}

ncclResult_t make_id(ncclUniqueId* out) {
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
  std::random_device rd;
  std::snprintf(id.name, sizeof id.name, "/ember-nccl-%d-%08x%08x", static_cast<int>(getpid()), rd(), rd());
  std::memset(out, 0, sizeof *out);
  std::memcpy(out->internal, &id, sizeof id);
  return ncclSuccess;
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t seen) {
  const timespec poll{0, 100'000'000};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &poll, nullptr, 0);
}

State::~State() {
  if (base) munmap(base, mapped);
}

void State::set_error(ncclResult_t e, std::string what) {
  std::lock_guard lock(message_mu);
  if (error.load() != ncclSuccess) return;
  message = std::move(what);
  error = e;
}

void State::note_abort(const char* fn) {
  if (aborted.load())
    set_error(ncclSystemError, std::string(fn) + ": the communicator was aborted (ncclCommAbort) on rank " +
                                   std::to_string(rank) + " while it waited for its peers");
  else if (header->aborted.load())
    set_error(ncclRemoteError, std::string(fn) + ": a peer aborted the communicator (ncclCommAbort); rank " +
                                   std::to_string(rank) + " cannot complete it");
}

void State::arrive() {
  header->wake.fetch_add(1, std::memory_order_acq_rel);
  futex_wake(&header->wake);
}

bool State::barrier() {
  const uint64_t k = ++barriers;
  counters[rank].value.store(k, std::memory_order_release);
  arrive();
  return wait([&] {
    for (int r = 0; r < nranks; ++r)
      if (counters[r].value.load(std::memory_order_acquire) < k) return false;
    return true;
  });
}

bool State::connect() {
  header->connected.fetch_add(1);
  arrive();
  return wait([&] { return header->connected.load() >= static_cast<uint32_t>(nranks); });
}

ncclResult_t attach(const IdLayout& id, int nranks, int rank, int device, const std::atomic<bool>& cancel,
                    std::shared_ptr<State>* out) {
  const int physical = physical_device(device);
  if (physical < 0) return fail(ncclUnhandledCudaError, "ncclCommInitRank: CUDA device %d does not exist", device);
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
  s->device = device;
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
  // As a real NCCL, init waits for every rank, however long (the futex wait polls `cancel`).
  const auto all_here = [&] { return s->header->attached.load() >= static_cast<uint32_t>(nranks); };
  s->wait([&] { return all_here() || cancel.load(); }, false);
  if (!all_here()) {
    shm_unlink(id.name);  // nothing left behind in /dev/shm by an init given up on
    return fail(ncclSystemError,
                "ncclCommInitRank: aborted (ncclCommAbort) while it waited for its peers (%u of %d joined)",
                s->header->attached.load(), nranks);
  }
  for (int r = 0; r < nranks; ++r)
    if (r != rank && s->devices[r].load() == physical + 1)
      return fail(ncclInvalidUsage,
                  "Duplicate GPU detected : rank %d and rank %d both on CUDA device %d (emulated device %d)",
                  rank, r, device, physical);
  *out = std::move(s);
  return ncclSuccess;
}

}  // namespace ember::emu::nccl
