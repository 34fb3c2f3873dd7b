// The emulated CUDA runtime (runtime.h): devices with a memory capacity, asynchronous
// streams run by worker threads, events, copies, and sticky errors.
// emu.h first: the toolkit's headers keep the qualifiers it defines.
#include "kernels/emu/emu.h"
#include "kernels/emu/runtime.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"

// The handles' types, which driver_types.h leaves opaque.
struct CUstream_st {
  int device = 0;
  std::mutex mu;
  std::condition_variable wake, idle;
  std::deque<std::function<void()>> queue;
  bool busy = false, quit = false;
  std::thread worker;
};

namespace {

struct EventState {
  std::mutex mu;
  std::condition_variable done;
  uint64_t recorded = 0, completed = 0;  // generations: a record bumps the first, its completion the second
  std::chrono::steady_clock::time_point when{};
  bool timing = true;
};

}  // namespace

struct CUevent_st {
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

namespace ember::emu {
namespace {

constexpr size_t kAlignment = 512;  // cudaMalloc aligns to at least 256 bytes

struct DeviceState {
  size_t capacity = 0, used = 0;
  std::vector<CUstream_st*> streams;
};

struct Allocation {
  int device;
  size_t bytes;
};

size_t parse_capacity(const char* text) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  std::string unit(end ? end : "");
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") scale = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib") scale = 1048576.0;
  else if (unit == "g" || unit == "gb" || unit == "gib") scale = 1073741824.0;
  EMBER_CHECK(end != text && std::isfinite(v) && v > 0 && scale > 0 && v * scale < 1.0e15,
              "EMBER_EMU_DEVICE_MEMORY must be a size such as 4GiB or 512MiB, not '", text, "'");
  return static_cast<size_t>(v * scale);
}

// The checking mode, EMBER_EMU_CHECK_HOST_ACCESS=1: device memory is mapped inaccessible
// whenever no device work (a launch, a copy, a memset) runs, so host code that reads or
// writes it through a pointer, instead of through a copy, faults at once and is named,
// where in emulation it would otherwise just work. Reads made while device work runs
// elsewhere are not caught.
std::atomic<uintptr_t> device_lo{UINTPTR_MAX}, device_hi{0};  // the span device memory lies in

void on_segv(int, siginfo_t* info, void*) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  if (addr >= device_lo.load() && addr < device_hi.load()) {
    static const char msg[] =
        "CUDA emulator: the host touched emulated device memory outside a launch or a copy "
        "(EMBER_EMU_CHECK_HOST_ACCESS=1); read device tensors through a copy (Tensor::to, to_vector)\n";
    [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
  }
  signal(SIGSEGV, SIG_DFL);  // then fault again, and end as any crash does
}

// Every emulated device the process sees, after CUDA_VISIBLE_DEVICES, and what is
// allocated where. One mutex guards it all: these calls are rare next to the work.
struct Runtime {
  std::mutex mu;
  std::vector<DeviceState> devices;
  std::vector<int> physical;  // of each visible device, its index among EMBER_EMU_DEVICES
  std::map<const char*, Allocation> allocations;  // by start address
  std::set<const void*> pinned;
  std::atomic<bool> failed{false};
  std::string failure;  // the first error a stream's work raised; written once
  bool check_host_access = false;
  int device_work = 0;  // device work running now; memory is accessible while > 0

  // Under mu, in the checking mode: every allocation readable and writable, or not.
  void set_access(bool open) {
    for (const auto& [p, a] : allocations)
      mprotect(const_cast<char*>(p), a.bytes, open ? PROT_READ | PROT_WRITE : PROT_NONE);
  }

  Runtime() {
    if (const char* env = std::getenv("EMBER_EMU_CHECK_HOST_ACCESS")) check_host_access = std::string(env) == "1";
    if (check_host_access) {
      struct sigaction sa = {};
      sa.sa_sigaction = on_segv;
      sa.sa_flags = SA_SIGINFO;
      sigaction(SIGSEGV, &sa, nullptr);
    }
    int count = 1;
    if (const char* env = std::getenv("EMBER_EMU_DEVICES")) {
      char* end = nullptr;
      const long n = std::strtol(env, &end, 10);
      EMBER_CHECK(end != env && *end == '\0' && n >= 0 && n <= 64,
                  "EMBER_EMU_DEVICES must be a number of devices in [0, 64], not '", env, "'");
      count = static_cast<int>(n);
    }
    size_t capacity = size_t(4) << 30;
    if (const char* env = std::getenv("EMBER_EMU_DEVICE_MEMORY")) capacity = parse_capacity(env);
    for (int i = 0; i < count; ++i) physical.push_back(i);
    if (const char* env = std::getenv("CUDA_VISIBLE_DEVICES")) {
      // As the driver reads it: a comma-separated list of ordinals, up to the first one
      // that is not a device; an empty list hides every device.
      physical.clear();
      std::set<long> seen;
      for (const char* p = env; *p;) {
        char* end = nullptr;
        const long i = std::strtol(p, &end, 10);
        if (end == p || i < 0 || i >= count || !seen.insert(i).second) break;
        physical.push_back(static_cast<int>(i));
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0') break;
      }
    }
    devices.resize(physical.size());
    for (DeviceState& d : devices) d.capacity = capacity;
  }
};

Runtime& runtime() {
  static Runtime* r = new Runtime;  // lives for the process: stream workers may outlive static destructors
  return *r;
}

// For its scope, device work runs: in the checking mode, device memory is accessible.
class DeviceWork {
 public:
  DeviceWork() {
    Runtime& r = runtime();
    std::lock_guard lock(r.mu);
    if (r.device_work++ == 0 && r.check_host_access) r.set_access(true);
  }
  ~DeviceWork() {
    Runtime& r = runtime();
    std::lock_guard lock(r.mu);
    if (--r.device_work == 0 && r.check_host_access) r.set_access(false);
  }
  DeviceWork(const DeviceWork&) = delete;
  DeviceWork& operator=(const DeviceWork&) = delete;
};

thread_local int current_device = 0;
thread_local cudaError_t last_error = cudaSuccess;

cudaError_t fail(cudaError_t e) {
  last_error = e;
  return e;
}

[[maybe_unused]] [[maybe_unused]] cudaError_t sticky() { return runtime().failed.load() ? fail(cudaErrorLaunchFailure) : cudaSuccess; }

[[maybe_unused]] [[maybe_unused]] bool valid_device(int d) {
  Runtime& r = runtime();
  std::lock_guard lock(r.mu);
  return d >= 0 && d < static_cast<int>(r.devices.size());
}

[[maybe_unused]] [[maybe_unused]] void worker_loop(CUstream_st* s) {
  current_device = s->device;
  std::unique_lock lock(s->mu);
  for (;;) {
    s->wake.wait(lock, [&] { return s->quit || !s->queue.empty(); });
    if (s->queue.empty()) return;  // quit, and nothing left
    std::function<void()> work = std::move(s->queue.front());
    s->queue.pop_front();
    s->busy = true;
    lock.unlock();
    if (!runtime().failed.load()) {
      try {
        const DeviceWork running;
        work();
      } catch (const std::exception& e) {
        Runtime& r = runtime();
        std::lock_guard g(r.mu);
        if (!r.failed.load()) {
          r.failure = std::string("unspecified launch failure (emulated device ") + std::to_string(s->device) +
                      "): " + e.what();
          r.failed = true;
        }
      }
    }
    work = nullptr;
    lock.lock();
    s->busy = false;
    if (s->queue.empty()) s->idle.notify_all();
  }
}

void drain(CUstream_st* s) {
  std::unique_lock lock(s->mu);
  s->idle.wait(lock, [&] { return s->queue.empty() && !s->busy; });
}

void drain_device(int device) {
  std::vector<CUstream_st*> streams;
  {
    Runtime& r = runtime();
    std::lock_guard lock(r.mu);
    if (device < 0 || device >= static_cast<int>(r.devices.size())) return;
    streams = r.devices[static_cast<size_t>(device)].streams;
  }
  for (CUstream_st* s : streams) drain(s);
}

void push(CUstream_st* s, std::function<void()> work) {
  {
    std::lock_guard lock(s->mu);
    s->queue.push_back(std::move(work));
  }
  s->wake.notify_one();
}

// Whether p lies in memory cudaMalloc gave out.
bool in_device_memory(const void* p) {
  Runtime& r = runtime();
  std::lock_guard lock(r.mu);
  auto it = r.allocations.upper_bound(static_cast<const char*>(p));
  if (it == r.allocations.begin()) return false;
  --it;
  return static_cast<const char*>(p) < it->first + it->second.bytes;
}

[[maybe_unused]] [[maybe_unused]] bool in_pinned_memory(const void* p) {
  Runtime& r = runtime();
  std::lock_guard lock(r.mu);
  return r.pinned.count(p) != 0;  // copies from pinned buffers start at their allocation (the caching allocator's blocks do not)
}

}  // namespace

void enqueue(cudaStream_t stream, std::function<void()> work) {
  if (runtime().failed.load()) throw Error(runtime().failure);
  if (stream == nullptr) {
    drain_device(current_device);
    const DeviceWork running;
    work();
    return;
  }
  push(stream, std::move(work));
}

bool is_device_pointer(const void* ptr) { return in_device_memory(ptr); }

int pointer_device(const void* ptr, size_t bytes) {
  Runtime& r = runtime();
  std::lock_guard lock(r.mu);
  const char* p = static_cast<const char*>(ptr);
  auto it = r.allocations.upper_bound(p);
  if (it == r.allocations.begin()) return -1;
  --it;
  const size_t offset = static_cast<size_t>(p - it->first);
  return offset < it->second.bytes && bytes <= it->second.bytes - offset ? it->second.device : -1;
}

int physical_device(int device) {
  Runtime& r = runtime();
  std::lock_guard lock(r.mu);
  return device >= 0 && device < static_cast<int>(r.physical.size()) ? r.physical[static_cast<size_t>(device)] : -1;
}

}  // namespace ember::emu

// The runtime API itself, only in the emulated-device build: elsewhere the program links
// the real one (libcudart), and these would take its place (the helpers above that only
// it uses are marked [[maybe_unused]] for that build).
#if defined(EMBER_CUDA_EMULATED)

using namespace ember::emu;

cudaError_t cudaGetDeviceCount(int* count) {
  Runtime& r = runtime();
  std::lock_guard lock(r.mu);
  *count = static_cast<int>(r.devices.size());
  return *count > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaGetDevice(int* device) {
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  if (attr != cudaDevAttrMultiProcessorCount) return fail(cudaErrorInvalidValue);
  *value = device_properties().sm_count;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  drain_device(current_device);
  return sticky();
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = runtime().failed.load() ? cudaErrorLaunchFailure : last_error;
  last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() { return runtime().failed.load() ? cudaErrorLaunchFailure : last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure:
      // Written once, before `failed` is set, and never again: the pointer stays valid.
      return runtime().failed.load() ? runtime().failure.c_str() : "unspecified launch failure";
    default: return "unknown error";
  }
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (const cudaError_t e = sticky()) return e;
  Runtime& r = runtime();
  const size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  {
    std::lock_guard lock(r.mu);
    if (current_device >= static_cast<int>(r.devices.size())) return fail(cudaErrorInvalidDevice);
    DeviceState& d = r.devices[static_cast<size_t>(current_device)];
    if (rounded > d.capacity - d.used) return fail(cudaErrorMemoryAllocation);
    d.used += rounded;
  }
  // Whole pages, so that the checking mode can protect each allocation alone.
  const size_t mapped = (rounded + 4095) / 4096 * 4096;
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  std::lock_guard lock(r.mu);
  if (p == MAP_FAILED) {
    r.devices[static_cast<size_t>(current_device)].used -= rounded;
    return fail(cudaErrorMemoryAllocation);
  }
  r.allocations[static_cast<const char*>(p)] = {current_device, rounded};
  std::memset(p, 0xFF, rounded);  // as the kernel tests' buffers: NaN (or -1) until written
  if (r.check_host_access) {
    if (r.device_work == 0) mprotect(p, rounded, PROT_NONE);
    const auto lo = reinterpret_cast<uintptr_t>(p);
    if (lo < device_lo.load()) device_lo = lo;
    if (lo + rounded > device_hi.load()) device_hi = lo + rounded;
  }
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  Runtime& r = runtime();
  int device = 0;
  {
    std::lock_guard lock(r.mu);
    auto it = r.allocations.find(static_cast<const char*>(ptr));
    if (it == r.allocations.end()) return fail(cudaErrorInvalidValue);
    device = it->second.device;
  }
  drain_device(device);  // cudaFree waits for the device, so no queued work reads freed memory
  std::lock_guard lock(r.mu);
  auto it = r.allocations.find(static_cast<const char*>(ptr));
  const size_t bytes = it->second.bytes;
  r.devices[static_cast<size_t>(device)].used -= bytes;
  r.allocations.erase(it);
  munmap(ptr, (bytes + 4095) / 4096 * 4096);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  Runtime& r = runtime();
  std::lock_guard lock(r.mu);
  if (current_device >= static_cast<int>(r.devices.size())) return fail(cudaErrorInvalidDevice);
  const DeviceState& d = r.devices[static_cast<size_t>(current_device)];
  *free = d.capacity - d.used;
  *total = d.capacity;
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned int) {
  void* p = std::aligned_alloc(kAlignment, (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment);
  *ptr = p;
  if (!p) return fail(cudaErrorMemoryAllocation);
  Runtime& r = runtime();
  std::lock_guard lock(r.mu);
  r.pinned.insert(p);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t bytes) { return cudaHostAlloc(ptr, bytes, 0); }

cudaError_t cudaFreeHost(void* ptr) {
  if (!ptr) return cudaSuccess;
  Runtime& r = runtime();
  {
    std::lock_guard lock(r.mu);
    if (r.pinned.erase(ptr) == 0) return fail(cudaErrorInvalidValue);
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  drain_device(current_device);
  if (const cudaError_t e = sticky()) return e;
  const DeviceWork copying;
  if (bytes) std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (const cudaError_t e = sticky()) return e;
  if (bytes == 0) return cudaSuccess;
  if (stream == nullptr) return cudaMemcpy(dst, src, bytes, kind);
  const bool src_pageable = !in_device_memory(src) && !in_pinned_memory(src);
  const bool dst_pageable = !in_device_memory(dst) && !in_pinned_memory(dst);
  if (src_pageable) {
    // As the driver does: pageable memory is staged before the call returns, so the
    // caller may reuse it at once; the copy itself still waits its turn in the stream.
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
    push(stream, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
  } else {
    push(stream, [dst, src, bytes] { std::memmove(dst, src, bytes); });
  }
  // A copy into pageable memory returns when it is done.
  if (dst_pageable) {
    drain(stream);
    return sticky();
  }
  return cudaSuccess;
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  drain_device(current_device);
  if (const cudaError_t e = sticky()) return e;
  const DeviceWork setting;
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  if (const cudaError_t e = sticky()) return e;
  if (stream == nullptr) return cudaMemset(ptr, value, bytes);
  push(stream, [ptr, value, bytes] { std::memset(ptr, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  if (!valid_device(current_device)) return fail(cudaErrorInvalidDevice);
  auto* s = new CUstream_st;
  s->device = current_device;
  s->worker = std::thread(worker_loop, s);
  Runtime& r = runtime();
  std::lock_guard lock(r.mu);
  r.devices[static_cast<size_t>(current_device)].streams.push_back(s);
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!stream) return fail(cudaErrorInvalidResourceHandle);
  {
    Runtime& r = runtime();
    std::lock_guard lock(r.mu);
    auto& streams = r.devices[static_cast<size_t>(stream->device)].streams;
    streams.erase(std::remove(streams.begin(), streams.end(), stream), streams.end());
  }
  {
    std::lock_guard lock(stream->mu);
    stream->quit = true;
  }
  stream->wake.notify_one();
  stream->worker.join();  // runs what was queued first, as a destroyed stream's work still completes
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (stream) drain(stream);
  else drain_device(current_device);
  return sticky();
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (const cudaError_t e = sticky()) return e;
  if (!stream) return cudaSuccess;
  std::lock_guard lock(stream->mu);
  return stream->queue.empty() && !stream->busy ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  std::shared_ptr<EventState> e = event->state;
  uint64_t target;
  {
    std::lock_guard lock(e->mu);
    target = e->recorded;  // the most recent record; waiting on a never-recorded event waits for nothing
  }
  auto wait = [e, target] {
    std::unique_lock lock(e->mu);
    // A failed device runs nothing more, so the record waited for may never complete.
    while (e->completed < target && !runtime().failed.load()) e->done.wait_for(lock, std::chrono::milliseconds(10));
  };
  if (!stream) {
    wait();
    return sticky();
  }
  push(stream, wait);
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  if (const cudaError_t e = sticky()) return e;
  enqueue(stream, [fn, user_data] { fn(user_data); });
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  *event = new CUevent_st;
  (*event)->state->timing = (flags & cudaEventDisableTiming) == 0;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  delete event;  // work that records or waits on it holds its state
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = sticky()) return e;
  std::shared_ptr<EventState> e = event->state;
  uint64_t generation;
  {
    std::lock_guard lock(e->mu);
    generation = ++e->recorded;
  }
  auto complete = [e, generation] {
    std::lock_guard lock(e->mu);
    e->completed = std::max(e->completed, generation);
    e->when = std::chrono::steady_clock::now();
    e->done.notify_all();
  };
  if (!stream) {
    drain_device(current_device);
    complete();
  } else {
    push(stream, complete);
  }
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = sticky()) return e;
  std::lock_guard lock(event->state->mu);
  return event->state->completed >= event->state->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event) return fail(cudaErrorInvalidResourceHandle);
  std::shared_ptr<EventState> e = event->state;
  {
    std::unique_lock lock(e->mu);
    const uint64_t target = e->recorded;
    // A failed device runs nothing more, so a pending record would never complete.
    while (e->completed < target && !runtime().failed.load())
      e->done.wait_for(lock, std::chrono::milliseconds(10));
  }
  return sticky();
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start || !end) return fail(cudaErrorInvalidResourceHandle);
  if (!start->state->timing || !end->state->timing) return fail(cudaErrorInvalidResourceHandle);
  if (cudaEventQuery(start) != cudaSuccess || cudaEventQuery(end) != cudaSuccess) return fail(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(end->state->when - start->state->when).count();
  return cudaSuccess;
}

#endif  // EMBER_CUDA_EMULATED
