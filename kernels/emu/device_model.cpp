// The emulated devices' model (device_model.h): the one owner of the runtime's state
// (devices, allocations, pinned buffers, streams, the sticky failure, the host-access
// check), and runtime.h's enqueue and pointer queries. runtime.cpp defines the CUDA runtime
// API on top of it.
// emu.h first: the toolkit's headers keep the qualifiers it defines.
#include "kernels/emu/emu.h"
#include "kernels/emu/device_model.h"
#include "kernels/emu/runtime.h"
#include "kernels/emu/trace.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"

// The stream handle's type, which driver_types.h leaves opaque.
struct CUstream_st {
  int device = 0;
  std::mutex mu;
  std::condition_variable wake, idle;
  std::deque<std::function<void()>> queue;
  bool busy = false, quit = false;
  std::thread worker;
  std::shared_ptr<ember::emu::model::Capture> capture;  // while it captures
};

namespace ember::emu {
namespace model {
namespace {

constexpr size_t kAlignment = 512;  // cudaMalloc and cudaHostAlloc align to at least 256 bytes

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
// whenever no device work (a launch, a copy, a memset) runs or is queued on a stream, so
// host code that reads or writes it through a pointer, instead of through a copy, faults
// at once and is named, where in emulation it would otherwise just work. Reads made while
// device work runs or waits elsewhere are not caught.
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

thread_local cudaStream_t this_worker_stream = nullptr;

void worker_loop(CUstream_st* s) {
  current_device = s->device;
  this_worker_stream = s;
  // Held from the first item of a run of queued work to the last, not per item: the
  // checking mode then opens and closes device memory (an mprotect of every allocation)
  // once per run, which made it cost as much as the work in long training runs.
  std::optional<DeviceWork> running;
  std::unique_lock lock(s->mu);
  for (;;) {
    s->wake.wait(lock, [&] { return s->quit || !s->queue.empty(); });
    if (s->queue.empty()) return;  // quit, and nothing left
    std::function<void()> work = std::move(s->queue.front());
    s->queue.pop_front();
    s->busy = true;
    lock.unlock();
    if (!running) running.emplace();
    if (!runtime().failed.load()) {
      try {
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
    if (s->queue.empty()) {  // the run ends: memory closes before the host can see the stream idle
      lock.unlock();         // (DeviceWork takes the runtime's mutex, which is taken before a stream's)
      running.reset();
      lock.lock();
    }
    s->busy = false;
    if (s->queue.empty()) s->idle.notify_all();
  }
}

}  // namespace

thread_local int current_device = 0;

cudaStream_t worker_stream() { return this_worker_stream; }

int device_count() {
  Runtime& r = runtime();
  std::lock_guard lock(r.mu);
  return static_cast<int>(r.devices.size());
}

bool valid_device(int device) { return device >= 0 && device < device_count(); }

bool failed() { return runtime().failed.load(); }

const char* failure() { return failed() ? runtime().failure.c_str() : "unspecified launch failure"; }

DeviceWork::DeviceWork() {
  Runtime& r = runtime();
  std::lock_guard lock(r.mu);
  if (r.device_work++ == 0 && r.check_host_access) r.set_access(true);
}

DeviceWork::~DeviceWork() {
  Runtime& r = runtime();
  std::lock_guard lock(r.mu);
  if (--r.device_work == 0 && r.check_host_access) r.set_access(false);
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
    if (s->capture) {
      s->capture->nodes.push_back(std::move(work));
      return;
    }
    s->queue.push_back(std::move(work));
  }
  s->wake.notify_one();
}

std::shared_ptr<Capture> capture_of(CUstream_st* s) {
  std::lock_guard lock(s->mu);
  return s->capture;
}

namespace {
std::atomic<int> captures_under_way{0};  // streams that capture, on every device
}  // namespace

void set_capture(CUstream_st* s, std::shared_ptr<Capture> capture) {
  std::lock_guard lock(s->mu);
  captures_under_way += (capture != nullptr) - (s->capture != nullptr);
  s->capture = std::move(capture);
}

bool any_capture() { return captures_under_way.load() > 0; }

std::vector<std::shared_ptr<Capture>> captures(int device) {
  Runtime& r = runtime();
  std::lock_guard lock(r.mu);
  std::vector<std::shared_ptr<Capture>> out;
  if (device < 0 || device >= static_cast<int>(r.devices.size())) return out;
  for (CUstream_st* s : r.devices[static_cast<size_t>(device)].streams) {
    std::lock_guard sl(s->mu);
    if (s->capture) out.push_back(s->capture);
  }
  return out;
}

bool stream_idle(CUstream_st* s) {
  std::lock_guard lock(s->mu);
  return s->queue.empty() && !s->busy;
}

int stream_device(CUstream_st* s) { return s->device; }

cudaStream_t create_stream(int device) {
  auto* s = new CUstream_st;
  s->device = device;
  s->worker = std::thread(worker_loop, s);
  Runtime& r = runtime();
  std::lock_guard lock(r.mu);
  r.devices[static_cast<size_t>(device)].streams.push_back(s);
  return s;
}

void destroy_stream(CUstream_st* s) {
  {
    Runtime& r = runtime();
    std::lock_guard lock(r.mu);
    auto& streams = r.devices[static_cast<size_t>(s->device)].streams;
    streams.erase(std::remove(streams.begin(), streams.end(), s), streams.end());
  }
  {
    std::lock_guard lock(s->mu);
    s->quit = true;
    if (s->capture) --captures_under_way;  // the capture ends with its stream
  }
  s->wake.notify_one();
  s->worker.join();  // runs what was queued first, as a destroyed stream's work still completes
  delete s;
}

cudaError_t allocate(int device, size_t bytes, void** ptr) {
  *ptr = nullptr;
  Runtime& r = runtime();
  const size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  {
    std::lock_guard lock(r.mu);
    if (device < 0 || device >= static_cast<int>(r.devices.size())) return cudaErrorInvalidDevice;
    DeviceState& d = r.devices[static_cast<size_t>(device)];
    if (rounded > d.capacity - d.used) return cudaErrorMemoryAllocation;
    d.used += rounded;
  }
  // Whole pages, so that the checking mode can protect each allocation alone.
  const size_t mapped = (rounded + 4095) / 4096 * 4096;
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  std::lock_guard lock(r.mu);
  if (p == MAP_FAILED) {
    r.devices[static_cast<size_t>(device)].used -= rounded;
    return cudaErrorMemoryAllocation;
  }
  r.allocations[static_cast<const char*>(p)] = {device, rounded};
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

bool release(void* ptr) {
  Runtime& r = runtime();
  int device = 0;
  {
    std::lock_guard lock(r.mu);
    auto it = r.allocations.find(static_cast<const char*>(ptr));
    if (it == r.allocations.end()) return false;
    device = it->second.device;
  }
  drain_device(device);  // cudaFree waits for the device, so no queued work reads freed memory
  std::lock_guard lock(r.mu);
  auto it = r.allocations.find(static_cast<const char*>(ptr));
  const size_t bytes = it->second.bytes;
  r.devices[static_cast<size_t>(device)].used -= bytes;
  r.allocations.erase(it);
  munmap(ptr, (bytes + 4095) / 4096 * 4096);
  return true;
}

bool memory_info(int device, size_t* free, size_t* total) {
  Runtime& r = runtime();
  std::lock_guard lock(r.mu);
  if (device < 0 || device >= static_cast<int>(r.devices.size())) return false;
  const DeviceState& d = r.devices[static_cast<size_t>(device)];
  *free = d.capacity - d.used;
  *total = d.capacity;
  return true;
}

void* allocate_pinned(size_t bytes) {
  void* p = std::aligned_alloc(kAlignment, (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment);
  if (!p) return nullptr;
  Runtime& r = runtime();
  std::lock_guard lock(r.mu);
  r.pinned.insert(p);
  return p;
}

bool release_pinned(void* ptr) {
  Runtime& r = runtime();
  {
    std::lock_guard lock(r.mu);
    if (r.pinned.erase(ptr) == 0) return false;
  }
  std::free(ptr);
  return true;
}

bool is_pinned(const void* p) {
  Runtime& r = runtime();
  std::lock_guard lock(r.mu);
  return r.pinned.count(p) != 0;
}

}  // namespace model

using namespace model;

void enqueue(cudaStream_t stream, std::function<void()> work) {
  if (failed()) throw Error(runtime().failure);
  if (stream == nullptr) {
    drain_device(current_device);
    const DeviceWork running;
    work();
    return;
  }
  push(stream, std::move(work));
}

bool is_device_pointer(const void* ptr) {
  Runtime& r = runtime();
  std::lock_guard lock(r.mu);
  auto it = r.allocations.upper_bound(static_cast<const char*>(ptr));
  if (it == r.allocations.begin()) return false;
  --it;
  return static_cast<const char*>(ptr) < it->first + it->second.bytes;
}

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
