// The emulator's launches: the checks a GPU makes of a launch configuration, and the pool
// of OS threads that share a grid's blocks (each block runs on one of them, see block.cpp).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "kernels/emu/block.h"
#include "kernels/emu/emu.h"
#include "kernels/emu/device_model.h"
#include "kernels/emu/profile.h"
#include "kernels/emu/trace.h"

namespace ember::emu {

DeviceProperties& device_properties() {
  static DeviceProperties props;
  return props;
}

namespace detail {
namespace {

// --- The pool of OS threads that run blocks ----------------------------------------------

int default_worker_threads() {
  if (const char* env = std::getenv("EMBER_EMU_THREADS")) {
    char* end = nullptr;
    long n = std::strtol(env, &end, 10);
    EMBER_CHECK(end != env && *end == '\0' && n >= 1 && n <= 256,
                "EMBER_EMU_THREADS must be a number of threads in [1, 256], not '", env, "'");
    return static_cast<int>(n);
  }
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
}

std::atomic<int> worker_threads{0};

// OS threads that stay between launches (each keeps its fiber stacks, block.cpp). A job
// is run by the caller and by `helpers` of them; run() returns when all are done.
class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard lock(mu_);
      quit_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void run(int helpers, const std::function<void()>& job) {
    std::unique_lock lock(mu_);
    while (static_cast<int>(threads_.size()) < helpers) threads_.emplace_back([this, i = threads_.size()] { loop(i); });
    job_ = &job;
    wanted_ = helpers;
    busy_ = helpers;
    ++generation_;
    lock.unlock();
    wake_.notify_all();
    job();
    lock.lock();
    done_.wait(lock, [&] { return busy_ == 0; });
    job_ = nullptr;
  }

 private:
  void loop(size_t index) {
    uint64_t seen = 0;
    std::unique_lock lock(mu_);
    for (;;) {
      wake_.wait(lock, [&] { return quit_ || generation_ != seen; });
      if (quit_) return;
      seen = generation_;
      if (static_cast<int>(index) >= wanted_) continue;
      const std::function<void()>* job = job_;
      lock.unlock();
      (*job)();
      lock.lock();
      if (--busy_ == 0) done_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  const std::function<void()>* job_ = nullptr;
  uint64_t generation_ = 0;
  int wanted_ = 0, busy_ = 0;
  bool quit_ = false;
};

// Runs `blocks` blocks of one launch (all of its grid's, or a sample's: profile.h,
// sampled_block): the calling thread and up to threads - 1 pool threads take blocks from a
// shared counter. The first failure stops the others.
void run_grid(const Launch& launch, uint64_t blocks) {
  const uint64_t grid_blocks = uint64_t(launch.grid.x) * launch.grid.y * launch.grid.z;
  std::atomic<uint64_t> next{0};
  std::mutex mu;
  std::string error;
  std::atomic<bool> stop{false};
  const std::function<void()> work = [&] {
    for (uint64_t i; !stop.load(std::memory_order_relaxed) && (i = next.fetch_add(1)) < blocks;) {
      const uint64_t b = sampled_block(i, blocks, grid_blocks);
      uint3 idx{static_cast<unsigned>(b % launch.grid.x), static_cast<unsigned>(b / launch.grid.x % launch.grid.y),
                static_cast<unsigned>(b / (uint64_t(launch.grid.x) * launch.grid.y))};
      try {
        run_block(launch, idx);
      } catch (const BlockFailure& f) {
        std::lock_guard lock(mu);
        if (!stop.exchange(true)) error = f.message;
      } catch (const std::exception& e) {
        std::lock_guard lock(mu);
        if (!stop.exchange(true)) error = std::string(launch.kernel) + ": " + e.what();
      }
    }
  };
  int threads = worker_threads.load();
  if (threads == 0) threads = default_worker_threads();
  const int helpers = static_cast<int>(std::min<uint64_t>(threads, blocks)) - 1;
  if (helpers <= 0) {
    work();
  } else {
    // One launch at a time uses the pool; launches from several host threads queue here.
    static std::mutex pool_mu;
    // Never destroyed: a stream's worker may still be running a launch at exit.
    static Pool& pool = *new Pool;
    std::lock_guard lock(pool_mu);
    pool.run(helpers, work);
  }
  if (!error.empty()) throw Error("CUDA emulator: " + error);
}

std::atomic<LaunchObserver> launch_observer{nullptr};  // set_launch_observer (trace.h)

std::mutex optin_mu;
std::map<const void*, size_t>& dynamic_shared_optin() {
  static std::map<const void*, size_t> m;
  return m;
}

}  // namespace

void allow_dynamic_shared(const void* kernel_id, size_t bytes) {
  const DeviceProperties& p = device_properties();
  EMBER_CHECK(bytes <= p.max_dynamic_shared_optin, "CUDA emulator: a kernel may opt in to at most ",
              p.max_dynamic_shared_optin, " bytes of dynamic shared memory, not ", bytes);
  std::lock_guard lock(optin_mu);
  dynamic_shared_optin()[kernel_id] = bytes;
}

void check_launch(const char* kernel, const void* kernel_id, dim3 grid, dim3 block, size_t shared_bytes) {
  const DeviceProperties& p = device_properties();
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  EMBER_CHECK(block.x >= 1 && block.y >= 1 && block.z >= 1 && grid.x >= 1 && grid.y >= 1 && grid.z >= 1,
              "CUDA emulator: ", kernel, ": empty launch (grid ", grid.x, "x", grid.y, "x", grid.z, ", block ", block.x,
              "x", block.y, "x", block.z, "); the GPU rejects it as an invalid configuration");
  EMBER_CHECK(block.x <= 1024 && block.y <= 1024 && block.z <= 64 && threads <= uint64_t(p.max_threads_per_block),
              "CUDA emulator: ", kernel, ": a block of ", block.x, "x", block.y, "x", block.z, " = ", threads,
              " threads exceeds the device's limits (", p.max_threads_per_block,
              " threads; 1024, 1024, 64 per dimension)");
  EMBER_CHECK(grid.x <= 2147483647u && grid.y <= 65535 && grid.z <= 65535, "CUDA emulator: ", kernel, ": grid ",
              grid.x, "x", grid.y, "x", grid.z, " exceeds the device's limits (2^31-1 x 65535 x 65535)");
  size_t limit = p.max_static_shared;
  {
    std::lock_guard lock(optin_mu);
    if (auto it = dynamic_shared_optin().find(kernel_id); it != dynamic_shared_optin().end()) limit = it->second;
  }
  EMBER_CHECK(shared_bytes <= limit, "CUDA emulator: ", kernel, ": ", shared_bytes,
              " bytes of dynamic shared memory requested, above the ", limit,
              "-byte limit (kernels opt in to more with allow_dynamic_shared)");
}

void launch(const char* kernel, const void* kernel_id, dim3 grid, dim3 block, size_t shared_bytes, Invoke invoke,
            const void* closure) {
  check_launch(kernel, kernel_id, grid, block, shared_bytes);
  static std::atomic<uint64_t> launches{0};
  const Launch l{kernel, grid, block, shared_bytes, invoke, closure, launches.fetch_add(1)};
  uint64_t blocks = 0;  // to run: the grid's, or a sample's when the profile asks for one
  struct Profiled {  // the launch's counters, when EMBER_EMU_PROFILE asks for them (profile.h)
    const Launch& l;
    bool on;
    ~Profiled() {
      if (on) profile_launch_end(l);
    }
  } profiled{l, profile_launch_begin(l, kernel_id, blocks)};
  const LaunchObserver observe = launch_observer.load(std::memory_order_relaxed);
  if (!observe) return run_grid(l, blocks);
  const auto begin = std::chrono::steady_clock::now();
  run_grid(l, blocks);
  const auto ns = [](auto t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  };
  observe({kernel, {grid.x, grid.y, grid.z}, {block.x, block.y, block.z}, shared_bytes, model::worker_stream(),
           model::current_device, ns(begin), ns(std::chrono::steady_clock::now())});
}

}  // namespace detail

void set_launch_observer(LaunchObserver observer) { detail::launch_observer = observer; }

void set_worker_threads(int n) {
  EMBER_CHECK(n >= 0 && n <= 256, "CUDA emulator: worker threads must be in [0, 256] (0: default), not ", n);
  detail::worker_threads = n;
}

}  // namespace ember::emu
