// The emulator's block scheduler: inside a block, one fiber per CUDA thread, switched
// with Boost.Context's fcontext (a switch is a few nanoseconds of saved registers;
// ucontext would make a system call per switch).
//
// A fiber runs until it reaches a barrier or a warp collective, or returns. The last
// thread to arrive releases the others. When no fiber can run and some have not finished,
// the block is deadlocked: that is reported as an ember::Error naming the kernel, the block
// and what each thread waits on, never as a hang.
#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/detail/fcontext.hpp>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "kernels/emu/block.h"
#include "kernels/emu/check.h"
#include "kernels/emu/emu.h"
#include "kernels/emu/profile.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMBER_EMU_ASAN 1
#else
#define EMBER_EMU_ASAN 0
#endif

namespace ember::emu {

namespace ctx = boost::context::detail;

namespace detail {
namespace {

// Instrumented code needs deeper stacks.
constexpr size_t kStackBytes = EMBER_EMU_ASAN ? 256 * 1024 : 64 * 1024;
constexpr size_t kCanaryBytes = 64;
constexpr unsigned char kCanary = 0xA5;

enum class State : uint8_t { kRunnable, kAtBarrier, kAtWarp, kDone };

struct Fiber {
  ctx::fcontext_t context = nullptr;
  uint3 index{};
  State state = State::kRunnable;
  uint64_t result = 0;  // of the warp collective it waited on
};

// A warp collective that some lanes have reached. Lanes named by `mask` must all arrive.
struct PendingWarpOp {
  WarpOp op;
  unsigned mask;    // as the lanes passed it
  unsigned needed;  // mask & lanes that exist in this (possibly partial) warp
  unsigned arrived = 0;
  int width;
  std::source_location site;
  uint64_t value[32];
  int param[32];
};

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::kSync: return "__syncwarp";
    case WarpOp::kShflIdx: return "__shfl_sync";
    case WarpOp::kShflUp: return "__shfl_up_sync";
    case WarpOp::kShflDown: return "__shfl_down_sync";
    case WarpOp::kShflXor: return "__shfl_xor_sync";
    case WarpOp::kBallot: return "__ballot_sync";
    case WarpOp::kAny: return "__any_sync";
    case WarpOp::kAll: return "__all_sync";
  }
  return "?";
}

std::string where(const std::source_location& s) {
  std::string file = s.file_name();
  if (auto slash = file.rfind('/'); slash != std::string::npos) file = file.substr(slash + 1);
  return file + ":" + std::to_string(s.line());
}

std::string str3(const uint3& v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}

// EMBER_EMU_SKIP_BARRIER=FILE:LINE, a mutation-testing aid (scripts/barrier-mutants.sh),
// never for users: the __syncthreads() or __syncwarp() called at that line of a file whose
// path ends with FILE returns at once, as if the line had lost its barrier, so a test run
// shows whether the suite notices the missing barrier without rebuilding anything.
struct SkippedBarrier {
  std::string file;
  unsigned line = 0;  // 0: none
};

SkippedBarrier parse_skipped_barrier(const char* env) {
  SkippedBarrier s;
  if (env == nullptr || *env == '\0') return s;
  const std::string v(env);
  const size_t colon = v.rfind(':');
  char* end = nullptr;
  const unsigned long line = colon == std::string::npos ? 0 : std::strtoul(v.c_str() + colon + 1, &end, 10);
  if (line == 0 || colon == 0 || end == nullptr || *end != '\0')
    throw Error("EMBER_EMU_SKIP_BARRIER: '" + v + "' is not FILE:LINE (a kernel file's path or its suffix, a colon, the line of a barrier)");
  s.file = v.substr(0, colon);
  s.line = static_cast<unsigned>(line);
  return s;
}

SkippedBarrier& skipped_barrier() {
  static SkippedBarrier skip = parse_skipped_barrier(std::getenv("EMBER_EMU_SKIP_BARRIER"));
  return skip;
}

bool skipped_barrier(const std::source_location& site) {
  const SkippedBarrier& skip = skipped_barrier();
  if (skip.line != site.line() || skip.line == 0) return false;
  const std::string_view file = site.file_name();
  return file.ends_with(skip.file) &&
         (file.size() == skip.file.size() || file[file.size() - skip.file.size() - 1] == '/');
}


// One OS thread's machinery: its fiber stacks (kept between blocks and launches) and the
// state of the block it is running.
class Worker {
 public:
  ~Worker() {
    release_stacks();
  }

  void run_block(const Launch& launch, uint3 block_index);

  // Called on a fiber.
  void syncthreads(const std::source_location& site);
  uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int param, int width,
                           const std::source_location& site);
  unsigned active_mask() const;
  void* dynamic_shared() { return shared_.get(); }
  [[noreturn]] void fail(const std::string& message) {
    record_failure(message);
    abandon();
  }

 private:
  static void fiber_main(ctx::transfer_t t);
  void ensure_stacks(unsigned count);
  void release_stacks();
  char* stack_top(unsigned i) const { return stacks_ + (i + 1) * slot_bytes(); }
  static size_t slot_bytes() { return kStackBytes + page_bytes(); }
  static size_t page_bytes() {
    static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return page;
  }

  void resume(unsigned i);
  void yield();            // from a fiber, back to the scheduler
  // From a fiber: record why the block fails, then abandon it. Two statements, so that
  // the message's temporaries are destroyed before the fiber's stack is left for good.
  void record_failure(const std::string& message) {
    failed_ = true;
    failure_ = block_name() + ": " + message;
  }
  [[noreturn]] void abandon();
  std::string block_name() const { return "kernel " + std::string(launch_->kernel) + ", block " + str3(block_index_); }
  std::string deadlock_report() const;
  void check_returning_lane();
  void check_canary() const;

  // Fiber stacks, each below a guard page so an overflow faults instead of corrupting.
  char* stacks_ = nullptr;
  size_t stacks_bytes_ = 0;
  unsigned stack_count_ = 0;

  const Launch* launch_ = nullptr;
  uint3 block_index_{};
  std::vector<Fiber> fibers_;
  unsigned threads_ = 0;
  unsigned current_ = 0;
  unsigned running_ = 0;  // fibers not yet done
  ctx::fcontext_t scheduler_ = nullptr;
  bool failed_ = false;
  std::string failure_;

  unsigned barrier_arrived_ = 0;
  std::source_location barrier_site_;
  std::vector<std::vector<PendingWarpOp>> warp_ops_;  // by warp

  struct AlignedDelete {
    void operator()(unsigned char* p) const { ::operator delete[](p, std::align_val_t(16)); }
  };
  std::unique_ptr<unsigned char[], AlignedDelete> shared_;
  size_t shared_capacity_ = 0;

#if EMBER_EMU_ASAN
  void* fake_stack_ = nullptr;
  const void* scheduler_stack_bottom_ = nullptr;
  size_t scheduler_stack_size_ = 0;
#endif
};

thread_local Worker* current_worker = nullptr;
thread_local uint64_t blocks_started = 0;  // block_serial()

Worker& worker() {
  EMBER_CHECK(current_worker != nullptr, "CUDA emulator: a device function was called outside a kernel launch");
  return *current_worker;
}

void Worker::release_stacks() {
  if (stacks_ == nullptr) return;
#if EMBER_EMU_ASAN
  // A fiber's last frames never return, so their poison stays in ASan's shadow, where a
  // later mapping at these addresses would inherit it.
  ASAN_UNPOISON_MEMORY_REGION(stacks_, stacks_bytes_);
#endif
  munmap(stacks_, stacks_bytes_);
  stacks_ = nullptr;
}

void Worker::ensure_stacks(unsigned count) {
  if (count <= stack_count_) return;
  release_stacks();
  stacks_bytes_ = slot_bytes() * count;
  void* mem = mmap(nullptr, stacks_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  EMBER_CHECK(mem != MAP_FAILED, "CUDA emulator: cannot map ", stacks_bytes_ >> 20, " MiB of fiber stacks");
  stacks_ = static_cast<char*>(mem);
  stack_count_ = count;
  for (unsigned i = 0; i < count; ++i) mprotect(stacks_ + i * slot_bytes(), page_bytes(), PROT_NONE);
}

void Worker::fiber_main(ctx::transfer_t t) {
  auto* self = static_cast<Worker*>(t.data);
  self->scheduler_ = t.fctx;
#if EMBER_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &self->scheduler_stack_bottom_, &self->scheduler_stack_size_);
#endif
  try {
    self->launch_->invoke(self->launch_->closure);
  } catch (const std::exception& e) {
    self->failed_ = true;
    self->failure_ = self->block_name() + ", thread " + str3(self->fibers_[self->current_].index) +
                     ": exception: " + e.what();
  }
  Fiber& me = self->fibers_[self->current_];
  me.state = State::kDone;
  --self->running_;
  if (check_options().sync && !self->failed_) self->check_returning_lane();
#if EMBER_EMU_ASAN
  __sanitizer_start_switch_fiber(nullptr, self->scheduler_stack_bottom_, self->scheduler_stack_size_);
#endif
  ctx::jump_fcontext(self->scheduler_, nullptr);  // never resumed
  __builtin_unreachable();
}

void Worker::resume(unsigned i) {
  current_ = i;
  Fiber& f = fibers_[i];
  thread_idx = f.index;
  check_thread(i);
#if EMBER_EMU_ASAN
  __sanitizer_start_switch_fiber(&fake_stack_, stack_top(i) - kStackBytes, kStackBytes);
#endif
  ctx::transfer_t t = ctx::jump_fcontext(f.context, this);
#if EMBER_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake_stack_, nullptr, nullptr);
#endif
  f.context = t.fctx;
}

void Worker::yield() {
#if EMBER_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, scheduler_stack_bottom_, scheduler_stack_size_);
#endif
  ctx::transfer_t t = ctx::jump_fcontext(scheduler_, nullptr);
  scheduler_ = t.fctx;
#if EMBER_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, &scheduler_stack_bottom_, &scheduler_stack_size_);
#endif
  // Back on this fiber: the scheduler set thread_idx before switching.
}

void Worker::abandon() {
  // Abandon this fiber: its stack is reused by the next block. Kernel code holds no
  // resources whose destructors matter.
#if EMBER_EMU_ASAN
  __sanitizer_start_switch_fiber(nullptr, scheduler_stack_bottom_, scheduler_stack_size_);
#endif
  ctx::jump_fcontext(scheduler_, nullptr);
  __builtin_unreachable();
}

void Worker::run_block(const Launch& launch, uint3 block_index) {
  launch_ = &launch;
  block_index_ = block_index;
  threads_ = launch.block.x * launch.block.y * launch.block.z;
  ensure_stacks(threads_);
  fibers_.assign(threads_, Fiber{});
  for (unsigned i = 0; i < threads_; ++i) {
    fibers_[i].index = uint3{i % launch.block.x, (i / launch.block.x) % launch.block.y,
                             i / (launch.block.x * launch.block.y)};
    fibers_[i].context = ctx::make_fcontext(stack_top(i), kStackBytes, &Worker::fiber_main);
  }
  warp_ops_.assign((threads_ + 31) / 32, {});
  barrier_arrived_ = 0;
  running_ = threads_;
  failed_ = false;

  // Dynamic shared memory starts as NaN bytes, with a canary after it.
  if (shared_capacity_ < launch.shared_bytes + kCanaryBytes) {
    shared_capacity_ = launch.shared_bytes + kCanaryBytes;
    shared_.reset(new (std::align_val_t(16)) unsigned char[shared_capacity_]);
  }
  std::memset(shared_.get(), 0xFF, launch.shared_bytes);
  std::memset(shared_.get() + launch.shared_bytes, kCanary, kCanaryBytes);
#if EMBER_EMU_ASAN
  ASAN_POISON_MEMORY_REGION(shared_.get() + launch.shared_bytes, kCanaryBytes);
#endif

  ++blocks_started;
  block_idx = block_index;
  block_dim = launch.block;
  grid_dim = launch.grid;
  current_worker = this;
  check_block_begin(launch, block_index, threads_, stacks_, stacks_bytes_, shared_.get(), launch.shared_bytes);
  profile_block_begin(launch, stacks_, stacks_bytes_, shared_.get(), launch.shared_bytes);
  // A GPU promises no order among threads between barriers. Every other block (and, for
  // the same block, every other launch) runs its threads last to first, so a kernel that
  // reads what another thread writes without a barrier (or __syncwarp) between them gets
  // a wrong answer in one order or the other.
  const bool reverse = (block_index.x + block_index.y + block_index.z + launch.sequence) % 2 == 1;
  while (running_ > 0 && !failed_) {
    bool ran = false;
    for (unsigned k = 0; k < threads_ && !failed_; ++k) {
      const unsigned i = reverse ? threads_ - 1 - k : k;
      if (fibers_[i].state != State::kRunnable) continue;
      ran = true;
      resume(i);
    }
    if (!ran && !failed_) {
      failed_ = true;
      failure_ = block_name() + ": deadlock: " + deadlock_report();
    }
  }
  current_worker = nullptr;
  check_block_end();
  profile_block_end();
#if EMBER_EMU_ASAN
  ASAN_UNPOISON_MEMORY_REGION(shared_.get() + launch.shared_bytes, kCanaryBytes);
#endif
  if (failed_) {
#if EMBER_EMU_ASAN
    // The abandoned fibers' frames stay poisoned in ASan's shadow; the next block reuses
    // their stacks.
    ASAN_UNPOISON_MEMORY_REGION(stacks_, stacks_bytes_);
#endif
    throw BlockFailure{failure_};
  }
  check_canary();
}

void Worker::check_canary() const {
  const unsigned char* canary = shared_.get() + launch_->shared_bytes;
  for (size_t i = 0; i < kCanaryBytes; ++i)
    if (canary[i] != kCanary)
      throw BlockFailure{block_name() + ": wrote past the end of its " + std::to_string(launch_->shared_bytes) +
                         " bytes of dynamic shared memory (byte " + std::to_string(launch_->shared_bytes + i) + ")"};
}

// synccheck: a lane returns while a pending warp collective's mask names it (on a GPU the
// collective's result is undefined, or it hangs).
void Worker::check_returning_lane() {
  const unsigned warp = current_ / 32, lane = current_ % 32;
  for (const PendingWarpOp& op : warp_ops_[warp])
    if ((op.needed >> lane & 1u) && !(op.arrived >> lane & 1u)) {
      record_failure("synccheck: " + std::string(op_name(op.op)) + " at " + where(op.site) + " names lane " +
                     std::to_string(lane) + " of warp " + std::to_string(warp) + " in its mask, which returned without reaching it (" +
                     std::to_string(std::popcount(op.arrived)) + " of " + std::to_string(std::popcount(op.needed)) +
                     " lanes arrived)");
      return;
    }
}

std::string Worker::deadlock_report() const {
  unsigned at_barrier = 0, done = 0;
  for (const Fiber& f : fibers_) {
    at_barrier += f.state == State::kAtBarrier;
    done += f.state == State::kDone;
  }
  std::string out;
  if (at_barrier > 0)
    out += std::to_string(at_barrier) + " of " + std::to_string(threads_) + " threads wait at __syncthreads() (" +
           where(barrier_site_) + "); ";
  for (size_t w = 0; w < warp_ops_.size(); ++w)
    for (const PendingWarpOp& op : warp_ops_[w]) {
      unsigned missing = op.needed & ~op.arrived;
      out += "warp " + std::to_string(w) + ": " + std::to_string(std::popcount(op.arrived)) + " lanes wait at " +
             op_name(op.op) + " (" + where(op.site) + ") for lanes";
      for (int lane = 0; lane < 32; ++lane)
        if (missing >> lane & 1u) out += " " + std::to_string(lane);
      out += "; ";
    }
  out += std::to_string(done) + " threads have returned";
  return out;
}

void Worker::syncthreads(const std::source_location& site) {
  if (skipped_barrier(site)) return;
  if (barrier_arrived_ == 0) {
    barrier_site_ = site;
  } else if (site.line() != barrier_site_.line() || std::strcmp(site.file_name(), barrier_site_.file_name()) != 0) {
    record_failure("divergent __syncthreads(): thread " + str3(fibers_[current_].index) + " waits at " +
                   where(site) + " while others wait at " + where(barrier_site_));
    abandon();
  }
  if (++barrier_arrived_ == threads_) {
    barrier_arrived_ = 0;
    check_barrier();
    for (Fiber& f : fibers_)
      if (f.state == State::kAtBarrier) f.state = State::kRunnable;
    return;
  }
  fibers_[current_].state = State::kAtBarrier;
  yield();
}

unsigned Worker::active_mask() const {
  const unsigned warp = current_ / 32, first = warp * 32;
  unsigned mask = 0;
  for (unsigned lane = 0; lane < 32 && first + lane < threads_; ++lane)
    if (fibers_[first + lane].state != State::kDone) mask |= 1u << lane;
  return mask;
}

uint64_t Worker::warp_collective(WarpOp op, unsigned mask, uint64_t value, int param, int width,
                                 const std::source_location& site) {
  if (op == WarpOp::kSync && skipped_barrier(site)) return 0;
  const unsigned warp = current_ / 32, lane = current_ % 32, first = warp * 32;
  const unsigned lanes = std::min(32u, threads_ - first);
  const unsigned exists = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
  if (!(mask >> lane & 1u)) {
    record_failure(std::string(op_name(op)) + " at " + where(site) + ": lane " + std::to_string(lane) +
                   " is not in its own mask");
    abandon();
  }
  if (width < 1 || width > 32 || (width & (width - 1)) != 0) {
    record_failure(std::string(op_name(op)) + " at " + where(site) + ": width " + std::to_string(width) +
                   " is not a power of two in [1, 32]");
    abandon();
  }

  auto& pending = warp_ops_[warp];
  PendingWarpOp* slot = nullptr;
  for (PendingWarpOp& p : pending) {
    if (p.mask == mask) {
      slot = &p;
    } else if ((p.needed & mask) != 0) {
      record_failure("lanes of warp " + std::to_string(warp) + " passed overlapping masks to warp collectives (" +
                     op_name(p.op) + " at " + where(p.site) + ", " + op_name(op) + " at " + where(site) + ")");
      abandon();
    }
  }
  if (slot == nullptr) {
    pending.push_back(PendingWarpOp{op, mask, mask & exists, 0, width, site, {}, {}});
    slot = &pending.back();
    for (unsigned l = 0; l < lanes; ++l)
      if ((slot->needed >> l & 1u) && fibers_[first + l].state == State::kDone) {
        record_failure(std::string(op_name(op)) + " at " + where(site) + ": its mask names lane " +
                       std::to_string(l) + ", which has returned");
        abandon();
      }
  } else if (slot->op != op || slot->width != width) {
    record_failure("lanes of warp " + std::to_string(warp) + " disagree: " + op_name(slot->op) + " at " +
                   where(slot->site) + " against " + op_name(op) + " at " + where(site));
    abandon();
  }
  slot->value[lane] = value;
  slot->param[lane] = param;
  slot->arrived |= 1u << lane;

  if (slot->arrived != slot->needed) {
    fibers_[current_].state = State::kAtWarp;
    yield();
    return fibers_[current_].result;
  }

  // Everyone is here: compute each lane's result, release the others.
  const PendingWarpOp done = *slot;
  pending.erase(pending.begin() + (slot - pending.data()));
  check_warp_collective(warp, done.mask);
  uint64_t ballot = 0;
  for (unsigned l = 0; l < 32; ++l)
    if ((done.needed >> l & 1u) && done.value[l] != 0) ballot |= 1u << l;
  // A read from a lane that is not taking part is undefined on the GPU; here it reads
  // all-one bits (NaN for floats) so that a result that depends on it shows.
  constexpr uint64_t kUndefined = ~uint64_t{0};
  for (unsigned l = 0; l < 32; ++l) {
    if (!(done.needed >> l & 1u)) continue;
    uint64_t r = 0;
    const int w = done.width, base = static_cast<int>(l) & ~(w - 1);
    int src = -1;
    switch (done.op) {
      case WarpOp::kSync: break;
      case WarpOp::kBallot: r = ballot; break;
      case WarpOp::kAny: r = ballot != 0; break;
      case WarpOp::kAll: r = ballot == done.needed; break;
      case WarpOp::kShflIdx: src = base + (done.param[l] & (w - 1)); break;
      case WarpOp::kShflUp:
        src = static_cast<int>(l) - done.param[l];
        if (src < base) src = static_cast<int>(l);
        break;
      case WarpOp::kShflDown:
        src = static_cast<int>(l) + done.param[l];
        if (src >= base + w) src = static_cast<int>(l);
        break;
      case WarpOp::kShflXor:
        src = static_cast<int>(l) ^ done.param[l];
        if (src >= base + w) src = static_cast<int>(l);
        break;
    }
    if (src >= 0) r = (src < 32 && (done.needed >> src & 1u)) ? done.value[src] : kUndefined;
    Fiber& f = fibers_[first + l];
    f.result = r;
    if (l != lane) f.state = State::kRunnable;
  }
  return fibers_[current_].result;
}

Worker& this_thread_worker() {
  thread_local Worker w;
  return w;
}

}  // namespace

void run_block(const Launch& launch, uint3 block_index) { this_thread_worker().run_block(launch, block_index); }

std::string set_skipped_barrier(const std::string& site) {
  SkippedBarrier& skip = skipped_barrier();
  std::string old = skip.line == 0 ? "" : skip.file + ":" + std::to_string(skip.line);
  skip = parse_skipped_barrier(site.c_str());
  return old;
}

void* dynamic_shared() { return worker().dynamic_shared(); }
uint64_t block_serial() { return blocks_started; }
void fail_block(const std::string& message) { worker().fail(message); }
void syncthreads(const std::source_location& site) { worker().syncthreads(site); }
uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t value, int param, int width,
                         const std::source_location& site) {
  return worker().warp_collective(op, mask, value, param, width, site);
}
unsigned active_mask() { return worker().active_mask(); }

}  // namespace detail
}  // namespace ember::emu
