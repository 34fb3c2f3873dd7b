// A fixed pool of worker threads that parallel_for hands contiguous chunks to.
// The caller runs chunk 0 itself, so a 2-thread pool has one worker. Workers and the
// caller spin briefly (kSpinRounds pauses, tens of microseconds) before sleeping on a
// condition variable: a training step makes hundreds of parallel regions, and waking
// a sleeping thread through the kernel cost about 8% of the MLP's epoch.
#include "kernels/cpu/parallel.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "base/error.h"
#include "core/device_runtime.h"
#include "memory/site.h"

namespace ember::kernels::cpu {
namespace {

thread_local bool tls_in_parallel = false;
thread_local bool tls_serial = false;

constexpr int kSpinRounds = 4096;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until done() or kSpinRounds pauses have passed; returns done().
template <class F>
bool spin_until(const F& done) {
  for (int i = 0; i < kSpinRounds; ++i) {
    if (done()) return true;
    cpu_relax();
  }
  return done();
}

int default_threads() {
  if (const char* env = std::getenv("EMBER_NUM_THREADS")) return parse_num_threads(env);
  return std::max(1u, std::thread::hardware_concurrency());
}

class Pool {
 public:
  explicit Pool(int threads) { resize(threads); }
  ~Pool() { stop(); }

  int size() const { return size_.load(std::memory_order_relaxed); }

  void resize(int threads) {
    std::lock_guard lock(run_mu_);
    const int before = size_.load();
    stop();
    quit_ = false;
    try {
      for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
    } catch (const std::system_error& e) {  // the system's thread limit, or memory for stacks
      stop();
      quit_ = false;
      for (int i = 1; i < before; ++i) workers_.emplace_back([this] { work(); });
      EMBER_FAIL("set_num_threads: cannot start ", threads, " threads: ", e.what(), " (the pool keeps ", before, ")");
    }
    size_ = threads;
  }

  void run(int64_t begin, int64_t end, int64_t chunks, const std::function<void(int64_t, int64_t)>& fn) {
    std::lock_guard run_lock(run_mu_);  // one parallel region at a time
    uint64_t gen;
    {
      std::lock_guard lock(mu_);
      job_ = {begin, end, chunks, &fn, memory::current_site()};
      next_ = 0;
      pending_ = chunks;
      error_ = nullptr;
      gen = ++generation_;
    }
    cv_.notify_all();
    drain(gen);
    if (!spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock lock(mu_);
      done_cv_.wait(lock, [&] { return pending_ == 0; });
    }
    std::lock_guard lock(mu_);  // pairs with the last chunk's release of mu_
    if (error_) std::rethrow_exception(error_);
  }

 private:
  struct Job {
    int64_t begin = 0, end = 0, chunks = 0;
    const std::function<void(int64_t, int64_t)>* fn = nullptr;
    memory::AllocationSite site;  // the caller's: scratch memory a chunk allocates is the caller op's
  };

  void stop() {
    {
      std::lock_guard lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  // Runs chunks of job `gen` until none is left. Chunks are claimed under the mutex
  // (there are at most as many as threads), so a late worker never runs a finished job.
  void drain(uint64_t gen) {
    tls_in_parallel = true;
    for (;;) {
      Job job;
      int64_t c;
      {
        std::lock_guard lock(mu_);
        if (generation_ != gen || next_ >= job_.chunks) break;
        c = next_++;
        job = job_;
      }
      int64_t n = job.end - job.begin;
      const memory::SiteScope site(job.site);
      try {
        (*job.fn)(job.begin + n * c / job.chunks, job.begin + n * (c + 1) / job.chunks);
      } catch (...) {
        std::lock_guard lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
      std::lock_guard lock(mu_);
      if (--pending_ == 0) done_cv_.notify_all();
    }
    tls_in_parallel = false;
  }

  void work() {
    uint64_t seen = 0;
    for (;;) {
      spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return quit_ || generation_ != seen; });
        if (quit_) return;
        seen = generation_;
      }
      drain(seen);
    }
  }

  std::mutex run_mu_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> workers_;
  Job job_;
  int64_t next_ = 0;
  // Written under mu_; atomic so that spinning threads can read them without it.
  std::atomic<int64_t> pending_{0};
  std::atomic<uint64_t> generation_{0};
  std::exception_ptr error_;
  std::atomic<int> size_{1};
  bool quit_ = false;
};

Pool& pool() {
  static Pool p(default_threads());
  return p;
}

}  // namespace

int parse_num_threads(const std::string& text) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int n = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, n);
  EMBER_CHECK(ec == std::errc() && p == end && n >= 1 && n <= cores, "EMBER_NUM_THREADS='", text,
              "': expected a whole number of threads from 1 to ", cores,
              " (the cores of this machine: more threads than cores only wait for each other)");
  return n;
}

int num_threads() { return pool().size(); }
void set_num_threads(int n) {
  EMBER_CHECK(n >= 1 && n <= kMaxThreads, "set_num_threads: expected a count from 1 to ", kMaxThreads, ", got ", n);
  pool().resize(n);
}
bool thread_serial() { return tls_serial; }
void set_thread_serial(bool on) { tls_serial = on; }

void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (begin >= end) return;
  int64_t n = end - begin;
  grain = std::max<int64_t>(grain, 1);
  int threads = tls_in_parallel || tls_serial ? 1 : num_threads();
  int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
  if (chunks <= 1) {
    fn(begin, end);
    return;
  }
  pool().run(begin, end, chunks, fn);
}

}  // namespace ember::kernels::cpu

namespace ember::kernels {
int cpu_num_threads() { return cpu::num_threads(); }
void set_cpu_num_threads(int n) { cpu::set_num_threads(n); }
bool cpu_thread_serial() { return cpu::thread_serial(); }
void set_cpu_thread_serial(bool on) { cpu::set_thread_serial(on); }
}  // namespace ember::kernels
