// The emulated NCCL: the NCCL API a ProcessGroup backend calls (communicators, groups,
// all-reduce, broadcast, reduce, all-gather, reduce-scatter), defined under nccl.h's own
// declarations for the emulated devices of the EMBER_CUDA=EMULATED build, which links no
// libnccl. kernels/emu/README.md ("The emulated NCCL") says what it models and what not.
// This file is the API (argument checks, errors, groups, queueing); nccl_comm.{h,cpp} the
// communicator's shared memory, barriers and init; nccl_collectives.{h,cpp} the data
// movement and reductions.
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
// - A rank's first collective connects it to its peers on the host, as NCCL >= 2.22 does by
//   default (lazy connection): it waits until every rank's first collective has come. A
//   blocking comm waits inside the call; in a group, at ncclGroupEnd.
// - A comm made with config.blocking = 0 never waits inside a call: init, the first
//   collective (its connection) and finalize run on a thread of the handle's and return
//   ncclInProgress; ncclCommGetAsyncError says ncclInProgress until they end, and another
//   call on the comm before then is ncclInvalidUsage, as NCCL requires. ncclCommAbort
//   releases them. Inits and collectives inside a group are served blocking.
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/emu/nccl_collectives.h"
#include "kernels/emu/nccl_comm.h"
#include "kernels/emu/runtime.h"

using namespace ember::emu::nccl;

// The handle nccl.h leaves opaque. ncclCommAbort frees the state but leaves the handle
// (a few bytes), so that ncclCommGetAsyncError can still say that the comm was aborted;
// the state is atomic because a watchdog thread may abort while another thread calls.
struct ncclComm {
  std::atomic<std::shared_ptr<State>> state;  // null until init completes (a grouped init: at ncclGroupEnd)
  int nranks = 0, rank = 0, device = 0;
  bool blocking = true;   // config->blocking
  bool connected = false;  // its first collective has come (touched by the calls, which NCCL serializes)
  std::atomic<bool> aborted{false};
  // A non-blocking call's work on `worker`: ncclInProgress while it runs, then its result
  // (with `message` for ncclGetLastError when it failed).
  std::atomic<int> progress{ncclSuccess};
  std::mutex mu;  // guards worker
  std::thread worker;
  std::mutex message_mu;  // guards message (the worker sets it while a join holds mu)
  std::string message;

  ~ncclComm() { join(); }
  void join() {
    std::lock_guard lock(mu);
    if (worker.joinable()) worker.join();
  }
};

namespace {

// ---- Groups: inits made between ncclGroupStart and ncclGroupEnd complete together.

thread_local int group_depth = 0;
thread_local std::vector<std::function<ncclResult_t()>> grouped_inits;
thread_local std::vector<std::shared_ptr<State>> grouped_connects;  // states whose first collective is in the group

// Runs `job` for a non-blocking call on the handle's worker thread, on the comm's device;
// the comm reads ncclInProgress until it ends. The caller has checked that no earlier
// call still runs.
ncclResult_t run_async(ncclComm* comm, std::function<ncclResult_t()> job) {
  std::lock_guard lock(comm->mu);
  if (comm->worker.joinable()) comm->worker.join();  // ended: its progress was no longer ncclInProgress
  comm->progress.store(ncclInProgress);
  comm->worker = std::thread([comm, job = std::move(job)] {
    cudaSetDevice(comm->device);
    const ncclResult_t r = job();
    if (r != ncclSuccess) {
      std::lock_guard message_lock(comm->message_mu);
      comm->message = last_error();
    }
    comm->progress.store(r);
  });
  return ncclInProgress;
}

// ---- Communicators.

// Completes a handle's init (at once, or at ncclGroupEnd for a grouped one).
ncclResult_t init_rank(ncclComm* comm, const IdLayout& id) {
  std::shared_ptr<State> s;
  if (const ncclResult_t e = attach(id, comm->nranks, comm->rank, comm->device, comm->aborted, &s)) return e;
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
  else if (comm->progress.load() == ncclInProgress)
    fail(ncclInvalidUsage,
         "%s: the communicator's last call is still in progress (poll ncclCommGetAsyncError until it is not "
         "ncclInProgress before the next call)", fn);
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
  auto queue = [pending = std::make_shared<Pending>(state), c, t, body, stream]() -> ncclResult_t {
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
  };
  if (comm->connected) return queue();
  comm->connected = true;
  if (group_depth > 0) {  // connected at ncclGroupEnd, with the group's other comms
    grouped_connects.push_back(state);
    return queue();
  }
  auto connect_then_queue = [state, queue, fn = c.fn]() -> ncclResult_t {
    if (!state->connect()) {  // aborted, here or by a peer
      state->note_abort(fn);
      std::lock_guard lock(state->message_mu);
      return fail(static_cast<ncclResult_t>(state->error.load()), "%s", state->message.c_str());
    }
    return queue();
  };
  if (!comm->blocking) return run_async(comm, connect_then_queue);
  return connect_then_queue();
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
  return make_id(unique_id);
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
  auto handle = std::make_unique<ncclComm>();
  handle->nranks = nranks;
  handle->rank = rank;
  handle->device = device;
  handle->blocking = !config || config->blocking != 0;  // NCCL_CONFIG_UNDEF_INT: the default, blocking
  if (group_depth > 0) {  // completed by ncclGroupEnd, with the group's other inits
    ncclComm* c = handle.get();
    grouped_inits.push_back([c, id] {
      cudaSetDevice(c->device);
      return init_rank(c, id);
    });
    *comm = handle.release();
    return ncclSuccess;
  }
  if (!handle->blocking) {  // the handle is the caller's now; the init completes on its worker
    ncclComm* c = handle.release();
    *comm = c;
    return run_async(c, [c, id] { return init_rank(c, id); });
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
  if (!comm->blocking)
    return run_async(comm, [s] {
      wait_pending(*s);
      return ncclSuccess;
    });
  wait_pending(*s);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  if (comm->aborted.load())  // a real NCCL has freed it: this would be a double free
    return fail(ncclInvalidUsage, "ncclCommDestroy: the communicator was aborted, which freed it (ncclCommAbort)");
  comm->join();
  if (std::shared_ptr<State> s = comm->state.load()) wait_pending(*s);  // its work still runs on the streams
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm || comm->aborted.exchange(true)) return ncclSuccess;  // the flag also ends a non-blocking init's wait
  const auto release = [](State& s) {
    s.aborted = true;
    s.header->aborted.store(1);
    s.arrive();
    while (s.running.load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
    // Queued work not yet started holds the state and skips itself when its turn comes.
  };
  if (std::shared_ptr<State> s = comm->state.load()) release(*s);
  comm->join();  // a non-blocking init, connection or finalize: released by the flags above
  if (std::shared_ptr<State> s = comm->state.exchange(nullptr); s && !s->aborted.load())
    release(*s);  // a non-blocking init that completed as the abort came
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
  if (const int p = comm->progress.load(); p != ncclSuccess) {  // a non-blocking call runs, or failed
    *async_error = static_cast<ncclResult_t>(p);
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
  if (comm && comm->progress.load() != ncclSuccess && comm->progress.load() != ncclInProgress) {
    std::lock_guard lock(comm->message_mu);
    last_error() = comm->message;
  } else if (std::shared_ptr<State> s = comm ? comm->state.load() : nullptr; s && s->error.load() != ncclSuccess) {
    std::lock_guard lock(s->message_mu);
    last_error() = s->message;
  }
  return last_error().c_str();
}

namespace {

// Runs the jobs on a thread each and waits for all; the first failure, with its message.
ncclResult_t run_together(const std::vector<std::function<ncclResult_t()>>& jobs) {
  std::vector<ncclResult_t> results(jobs.size(), ncclSuccess);
  std::vector<std::string> messages(jobs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < jobs.size(); ++i)
    threads.emplace_back([&, i] {
      results[i] = jobs[i]();
      messages[i] = last_error();
    });
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < jobs.size(); ++i)
    if (results[i] != ncclSuccess) {
      last_error() = messages[i];
      return results[i];
    }
  return ncclSuccess;
}

}  // namespace

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd: no ncclGroupStart before it");
  if (--group_depth > 0) return ncclSuccess;
  // Collectives were queued as they were called; grouped inits, then the first collectives'
  // connections, meet their peers now, each on a thread of its own, as one thread may
  // drive several ranks.
  std::vector<std::function<ncclResult_t()>> inits, connects;
  inits.swap(grouped_inits);
  std::vector<std::shared_ptr<State>> states;
  states.swap(grouped_connects);
  if (const ncclResult_t e = run_together(inits)) return e;
  for (std::shared_ptr<State>& s : states)
    connects.push_back([s] {
      if (s->connect()) return ncclSuccess;
      s->note_abort("ncclGroupEnd");
      return fail(ncclRemoteError, "ncclGroupEnd: the communicator was aborted while rank %d connected to its peers",
                  s->rank);
    });
  return run_together(connects);
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  const Call c{"ncclAllReduce", sendbuff, recvbuff, count, datatype, op, -1};
  return submit(comm, c, count, count, true, false, stream, all_reduce);
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  const Call c{"ncclReduce", sendbuff, recvbuff, count, datatype, op, root};
  const bool is_root = comm && root == comm->rank;
  return submit(comm, c, count, is_root ? count : 0, true, true, stream, all_reduce);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  const Call c{"ncclBroadcast", sendbuff, recvbuff, count, datatype, ncclSum, root};
  const bool is_root = comm && root == comm->rank;
  return submit(comm, c, is_root ? count : 0, count, false, true, stream, broadcast);
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  const Call c{"ncclAllGather", sendbuff, recvbuff, sendcount, datatype, ncclSum, -1};
  const size_t ranks = comm ? static_cast<size_t>(comm->nranks) : 0;
  return submit(comm, c, sendcount, sendcount * ranks, false, false, stream, all_gather);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const Call c{"ncclReduceScatter", sendbuff, recvbuff, recvcount, datatype, op, -1};
  const size_t ranks = comm ? static_cast<size_t>(comm->nranks) : 0;
  return submit(comm, c, recvcount * ranks, recvcount, true, false, stream, reduce_scatter);
}
