// racecheck and initcheck over every load and store of device code (kernels/emu/check.h).
//
// Note [Instrumented kernels]: kernel translation units are compiled with
// -fsanitize=thread but libtsan is never linked: the __tsan_* functions below are the
// runtime, as KCSAN's are in the Linux kernel. Each is a call and a thread-local test when
// no block with checks runs on the calling thread. Inside one, an access is
//   - ignored on the fibers' stacks and on the emulator's own thread-locals (threadIdx ...);
//   - shared memory when it falls in the block's dynamic shared memory or in a thread-local
//     block of the program or of ember's library (where `__shared__`, a `static
//     thread_local`, lives);
//   - global memory otherwise (device allocations, and the kernel tests' host arrays).
// Per byte it keeps the last plain write, two atomic writes and two reads of the current
// barrier interval (the epoch): an access by another thread that conflicts (one of them a write, not both
// atomic) is a hazard: an error across warps, a warning inside a warp when no warp
// collective came between (compute-sanitizer's grading). Shared bytes also remember
// whether any thread of the block wrote them (initcheck). The shadow is a hash table per
// OS thread, of shared bytes per block and of global bytes per interval (at most
// kMaxGlobalBytes of them; the rest of an interval goes unchecked, a stated limit).
#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/error.h"
#include "kernels/emu/check.h"
#include "kernels/emu/memory_ranges.h"
#include "kernels/emu/model.h"
#include "kernels/emu/profile.h"

namespace ember::emu::detail {
namespace {

CheckOptions parse_options(const char* env) {
  CheckOptions o;
  if (env == nullptr) return o;
  std::string_view s(env);
  while (!s.empty()) {
    const size_t comma = s.find(',');
    const std::string_view item = s.substr(0, comma);
    if (item == "race") o.race = true;
    else if (item == "init") o.init = true;
    else if (item == "sync") o.sync = true;
    else if (item == "all") o.race = o.init = o.sync = true;
    else if (!item.empty())
      throw Error("EMBER_EMU_CHECK: unknown check '" + std::string(item) + "' (race, init, sync or all)");
    s = comma == std::string_view::npos ? std::string_view() : s.substr(comma + 1);
  }
  return o;
}

CheckOptions& options() {
  static CheckOptions o = parse_options(std::getenv("EMBER_EMU_CHECK"));
  return o;
}

// --- Source lines of return addresses -----------------------------------------------------

// "file:line (function)" of the instruction before `pc`, by addr2line on the module that
// holds it (kernel translation units carry line tables, EMBER_EMU_INSTRUMENT).
std::string symbolize(uintptr_t pc) {
  static std::mutex mu;
  static std::map<uintptr_t, std::string> cache;
  std::lock_guard lock(mu);
  if (auto it = cache.find(pc); it != cache.end()) return it->second;
  std::string out = "pc 0x" + (std::ostringstream() << std::hex << pc).str();
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(pc), &info) != 0 && info.dli_fname != nullptr) {
    const auto* ehdr = static_cast<const ElfW(Ehdr)*>(info.dli_fbase);
    const uintptr_t addr = pc - 1 - (ehdr->e_type == ET_DYN ? reinterpret_cast<uintptr_t>(info.dli_fbase) : 0);
    const std::string file = info.dli_fname[0] != '\0' ? info.dli_fname : "/proc/self/exe";
    const std::string command =
        "addr2line -C -f -i -e '" + file + "' 0x" + (std::ostringstream() << std::hex << addr).str() + " 2>/dev/null";
    if (FILE* p = popen(command.c_str(), "r")) {
      char function[4096], line[4096];
      // The first pair is the innermost inlined frame: the access's own line.
      if (std::fgets(function, sizeof function, p) && std::fgets(line, sizeof line, p)) {
        std::string f(function), l(line);
        while (!f.empty() && f.back() == '\n') f.pop_back();
        while (!l.empty() && l.back() == '\n') l.pop_back();
        if (const size_t k = l.find(" (discriminator"); k != std::string::npos) l.resize(k);
        if (const size_t k = l.rfind("/kernels/"); k != std::string::npos) l = l.substr(k + 1);
        else if (const size_t t = l.rfind("/tests/"); t != std::string::npos) l = l.substr(t + 1);
        if (f.size() > 80) f = f.substr(0, 77) + "...";
        if (l.rfind("??", 0) != 0) out = l + " (" + f + ")";
        else if (f != "??") out = f;
      }
      pclose(p);
    }
  }
  cache.emplace(pc, out);
  return out;
}

// --- The shadow -------------------------------------------------------------------------

struct Access {
  uintptr_t pc = 0;  // 0: none in this interval
  uint32_t thread = 0;
  uint32_t warp_syncs = 0;  // collectives the thread's warp had completed by then
  bool atomic = false;
};

struct Cell {
  uintptr_t addr = 0;
  uint64_t generation = 0;  // the table's generation it belongs to; older ones are empty
  uint64_t epoch = 0;       // the barrier interval of the accesses below
  bool written = false;     // by any thread of the block (shared memory: initcheck)
  Access write, atomics[2], read[2];  // the last plain write; two atomic writes and two reads
};

// Open addressing, linear probing. A new generation empties it in O(1): cells of older
// generations count as empty, and within one generation cells only ever fill, so probe
// chains stay intact.
class Table {
 public:
  void clear() {
    ++generation_;
    live_ = 0;
  }
  size_t live() const { return live_; }
  Cell& at(uintptr_t addr) {
    if (cells_.empty() || (live_ + 1) * 2 > cells_.size()) grow();
    for (size_t i = hash(addr) & mask_;; i = (i + 1) & mask_) {
      Cell& c = cells_[i];
      if (c.generation != generation_) {
        c = Cell{};
        c.addr = addr;
        c.generation = generation_;
        ++live_;
        return c;
      }
      if (c.addr == addr) return c;
    }
  }

 private:
  static size_t hash(uintptr_t a) { return (a * 0x9E3779B97F4A7C15ull) >> 20; }
  void grow() {
    std::vector<Cell> old = std::exchange(cells_, std::vector<Cell>(std::max<size_t>(1024, cells_.size() * 2)));
    mask_ = cells_.size() - 1;  // the new cells' generation, 0, is never the current one
    live_ = 0;
    for (const Cell& c : old) {
      if (c.generation != generation_) continue;
      size_t i = hash(c.addr) & mask_;
      while (cells_[i].generation == generation_) i = (i + 1) & mask_;
      cells_[i] = c;
      ++live_;
    }
  }
  std::vector<Cell> cells_;
  size_t mask_ = 0;
  size_t live_ = 0;
  uint64_t generation_ = 1;
};

// Beyond this many distinct global bytes in one barrier interval of a block, the rest of
// the interval's global accesses go unchecked (a grid-stride loop over a large tensor).
constexpr size_t kMaxGlobalBytes = size_t{1} << 16;

// The state of the checks on one OS thread: the block it runs, and the shadow.
struct Checker {
  bool active = false;  // a block with memory checks runs here
  const Launch* launch = nullptr;
  uint3 block{};
  unsigned threads = 0, thread = 0;
  uint64_t epoch = 0;
  std::vector<uint32_t> warp_syncs;
  Range stacks, dynamic_shared;
  std::vector<Range> tls;  // static thread-local blocks (static shared memory)
  Range own[4];            // the emulator's own thread-locals: threadIdx, blockIdx, ...
  bool tls_known = false;
  Table shared, global;
  bool global_full = false;
};

thread_local Checker* checker __attribute__((tls_model("initial-exec"))) = nullptr;

Checker& this_thread_checker() {
  thread_local Checker c;
  return c;
}

thread_local std::string failure_message;

std::string str3(const uint3& v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}

std::string thread_name(const Checker& c, uint32_t t) {
  const dim3 b = c.launch->block;
  return "thread " + str3(uint3{t % b.x, t / b.x % b.y, t / (b.x * b.y)}) + " (warp " + std::to_string(t / 32) +
         ", lane " + std::to_string(t % 32) + ")";
}

std::string location(const Checker& c, uintptr_t addr, bool is_shared) {
  std::ostringstream s;
  if (!is_shared) {
    s << "global memory at 0x" << std::hex << addr;
  } else if (c.dynamic_shared.holds(addr)) {
    s << "dynamic shared memory, byte " << addr - c.dynamic_shared.lo;
  } else {
    s << "static shared memory at 0x" << std::hex << addr;
  }
  return s.str();
}

const char* kind_name(bool write) { return write ? "writes" : "reads"; }

// Reports a hazard between an earlier access and the current one: fails the block
// (error), or prints a warning once per pair of source lines.
void hazard(Checker& c, uintptr_t addr, bool is_shared, const Access& before, bool before_write, uintptr_t pc,
            bool write) {
  const bool same_warp = before.thread / 32 == c.thread / 32;
  static std::mutex mu;
  static std::set<std::pair<uintptr_t, uintptr_t>> warned;
  if (same_warp) {
    std::lock_guard lock(mu);
    if (!warned.emplace(before.pc, pc).second) return;
  }
  const char* name = before_write ? (write ? "write-after-write" : "read-after-write") : "write-after-read";
  std::string msg = std::string("racecheck: ") + name + " hazard on " + location(c, addr, is_shared) + ": " +
                    thread_name(c, before.thread) + " " + kind_name(before_write) + " at " + symbolize(before.pc) +
                    ", then " + thread_name(c, c.thread) + " " + kind_name(write) + " at " + symbolize(pc) +
                    (same_warp ? ", with no __syncwarp or warp collective between them"
                               : ", with no __syncthreads() between them");
  if (!same_warp) {
    failure_message = std::move(msg);
    fail_block(failure_message);
  }
  std::fprintf(stderr, "CUDA emulator: kernel %s, block %s: warning: %s\n", c.launch->kernel, str3(c.block).c_str(),
               msg.c_str());
}

// Whether `before` (by another thread, in this interval) and the current access conflict.
bool conflicts(const Checker& c, const Access& before, bool atomic) {
  if (before.pc == 0 || before.thread == c.thread || (before.atomic && atomic)) return false;
  const unsigned warp = c.thread / 32;
  return before.thread / 32 != warp || before.warp_syncs == c.warp_syncs[warp];
}

// `lands`: a write that puts its bytes there now (initcheck); a cp.async not yet waited for
// is a write for racecheck only.
void on_byte(Checker& c, uintptr_t addr, bool is_shared, bool read, bool write, bool atomic, uintptr_t pc,
             bool lands) {
  Table& table = is_shared ? c.shared : c.global;
  if (!is_shared && c.global_full) return;
  Cell& cell = table.at(addr);
  if (!is_shared && table.live() >= kMaxGlobalBytes) c.global_full = true;
  const CheckOptions& o = options();
  if (write && lands) cell.written = true;
  if (!o.race) return;
  if (cell.epoch != c.epoch) {
    cell.epoch = c.epoch;
    cell.write = cell.atomics[0] = cell.atomics[1] = cell.read[0] = cell.read[1] = Access{};
  }
  if (conflicts(c, cell.write, atomic)) hazard(c, addr, is_shared, cell.write, true, pc, write);
  if (!atomic)
    for (const Access& a : cell.atomics)
      if (conflicts(c, a, atomic)) hazard(c, addr, is_shared, a, true, pc, write);
  if (write)
    for (const Access& r : cell.read)
      if (conflicts(c, r, atomic)) hazard(c, addr, is_shared, r, false, pc, true);
  const Access now{pc, c.thread, c.warp_syncs[c.thread / 32], atomic};
  // Two accesses of a kind are kept: the first, and the latest by another thread, so that a
  // conflicting thread is found whichever order the threads ran in.
  auto keep = [&](Access (&slots)[2]) {
    if (slots[0].pc == 0 || slots[0].thread == c.thread) slots[0] = now;
    else slots[1] = now;
  };
  if (write && !atomic) cell.write = now;
  else if (write) keep(cell.atomics);
  else keep(cell.read);
}

enum class Memory { kUnchecked, kShared, kGlobal };

// Which memory an address of the running block is, as the checks see it.
Memory classify(const Checker& c, uintptr_t addr) {
  if (c.stacks.holds(addr)) return Memory::kUnchecked;
  if (c.dynamic_shared.holds(addr)) return Memory::kShared;
  for (const Range& r : c.tls)
    if (r.holds(addr)) {
      for (const Range& own : c.own)
        if (own.holds(addr)) return Memory::kUnchecked;
      return Memory::kShared;
    }
  return Memory::kGlobal;
}

// Runs the checks' own code with the checks off: it calls library functions (std::string's)
// whose instrumented copies, instantiated in a kernel translation unit, the linker may have
// kept, and a report made while reporting would wait for itself. A report that fails the
// block leaves them off; the block ends there.
template <class F>
void checked(Checker* c, F&& f) {
  checker = nullptr;
  f();
  checker = c;
}

// racecheck and initcheck of one access by the running thread of a block with checks on.
void check_access(Checker& c, const void* p, size_t size, bool read, bool write, bool atomic, uintptr_t pc,
                  bool lands = true) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  const Memory memory = classify(c, addr);
  if (memory == Memory::kUnchecked) return;
  const bool is_shared = memory == Memory::kShared;
  // initcheck: a read none of whose bytes any thread of the block wrote. (A whole-struct
  // copy reads the struct's padding, which no store writes.)
  if (is_shared && read && options().init) {
    bool written = false;
    for (size_t i = 0; i < size && !written; ++i) written = c.shared.at(addr + i).written;
    if (!written) {
      failure_message = "initcheck: " + thread_name(c, c.thread) + " reads " + location(c, addr, true) + " at " +
                        symbolize(pc) + ", which no thread of the block has written";
      fail_block(failure_message);
    }
  }
  for (size_t i = 0; i < size; ++i) on_byte(c, addr + i, is_shared, read, write, atomic, pc, lands);
}

// Every instrumented load and store comes here (Note [Instrumented kernels]): a
// thread-local test when no block with checks runs on this OS thread or a model's
// bookkeeping runs (ModelScope).
inline void on_access(const void* p, size_t size, bool read, bool write, bool atomic, void* ret) {
  profile_access(p, size, read, write, atomic, ret);  // the profile counters (profile.h), when asked for
  Checker* c = checker;
  if (__builtin_expect(c == nullptr, 1)) return;
  checked(c, [&] { check_access(*c, p, size, read, write, atomic, reinterpret_cast<uintptr_t>(ret)); });
}

// The checker a ModelScope set aside (model.h), and how many scopes are open.
thread_local Checker* model_checker __attribute__((tls_model("initial-exec"))) = nullptr;
thread_local unsigned model_depth __attribute__((tls_model("initial-exec"))) = 0;

// For note_read/note_write: the running block's checker, inside a ModelScope or not.
Checker* noting_checker() { return checker != nullptr ? checker : model_checker; }

}  // namespace

void model_begin() {
  if (model_depth++ == 0) model_checker = std::exchange(checker, nullptr);
}

void model_end() {
  if (--model_depth == 0) checker = std::exchange(model_checker, nullptr);
}

void note_read(const void* p, size_t bytes) {
  const auto pc = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  if (Checker* c = noting_checker()) checked(checker, [&] { check_access(*c, p, bytes, true, false, false, pc); });
}

void note_write(const void* p, size_t bytes) {
  const auto pc = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  if (Checker* c = noting_checker()) checked(checker, [&] { check_access(*c, p, bytes, false, true, false, pc); });
}

void note_pending_write(const void* p, size_t bytes) {
  const auto pc = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  if (Checker* c = noting_checker()) checked(checker, [&] { check_access(*c, p, bytes, false, true, false, pc, false); });
}

const CheckOptions& check_options() { return options(); }

CheckOptions set_check_options(const CheckOptions& o) { return std::exchange(options(), o); }

void check_block_begin(const Launch& launch, uint3 block, unsigned threads, const void* stacks, size_t stack_bytes,
                       const void* dynamic_shared, size_t dynamic_shared_bytes) {
  if (!options().memory()) return;
  Checker& c = this_thread_checker();
  if (!c.tls_known) {
    c.tls = shared_tls_ranges();
    c.own[0] = range_of(thread_idx);
    c.own[1] = range_of(block_idx);
    c.own[2] = range_of(block_dim);
    c.own[3] = range_of(grid_dim);
    c.tls_known = true;
  }
  c.launch = &launch;
  c.block = block;
  c.threads = threads;
  c.thread = 0;
  ++c.epoch;
  c.warp_syncs.assign((threads + 31) / 32, 0);
  const auto s = reinterpret_cast<uintptr_t>(stacks);
  c.stacks = Range{s, s + stack_bytes};
  const auto d = reinterpret_cast<uintptr_t>(dynamic_shared);
  c.dynamic_shared = Range{d, d + dynamic_shared_bytes};
  c.shared.clear();
  c.global.clear();
  c.global_full = false;
  checker = &c;
  // A fiber that failed inside a ModelScope (a hazard it noted) never closed it.
  model_checker = nullptr;
  model_depth = 0;
}

void check_block_end() {
  checker = nullptr;
  model_checker = nullptr;
  model_depth = 0;
}

void check_thread(unsigned thread) {
  if (checker != nullptr) checker->thread = thread;
}

void check_barrier() {
  if (Checker* c = checker) {
    ++c->epoch;
    c->global.clear();
    c->global_full = false;
  }
}

void check_warp_collective(unsigned warp, unsigned) {
  if (Checker* c = checker) ++c->warp_syncs[warp];
}

}  // namespace ember::emu::detail

// --- The instrumentation's entry points (Note [Instrumented kernels]) --------------------
//
// Protected: the instrumented kernels of ember's own library call them directly, not
// through its PLT (the PLT stubs held 6% of a perf profile of NAME.cuda tests with no
// check on; the hooks' share went from 15.8% to 14.6%); programs still link to them.
#define EMBER_EMU_HOOK extern "C" __attribute__((visibility("protected")))

using ember::emu::detail::on_access;

#define EMBER_EMU_PLAIN(n)                                                                               \
  EMBER_EMU_HOOK void __tsan_read##n(void* p) { on_access(p, n, true, false, false, __builtin_return_address(0)); } \
  EMBER_EMU_HOOK void __tsan_write##n(void* p) { on_access(p, n, false, true, false, __builtin_return_address(0)); } \
  EMBER_EMU_HOOK void __tsan_unaligned_read##n(void* p) {                                                   \
    on_access(p, n, true, false, false, __builtin_return_address(0));                                   \
  }                                                                                                      \
  EMBER_EMU_HOOK void __tsan_unaligned_write##n(void* p) {                                                  \
    on_access(p, n, false, true, false, __builtin_return_address(0));                                   \
  }                                                                                                      \
  EMBER_EMU_HOOK void __tsan_volatile_read##n(void* p) {                                                    \
    on_access(p, n, true, false, false, __builtin_return_address(0));                                   \
  }                                                                                                      \
  EMBER_EMU_HOOK void __tsan_volatile_write##n(void* p) {                                                   \
    on_access(p, n, false, true, false, __builtin_return_address(0));                                   \
  }
EMBER_EMU_PLAIN(1)
EMBER_EMU_PLAIN(2)
EMBER_EMU_PLAIN(4)
EMBER_EMU_PLAIN(8)
EMBER_EMU_PLAIN(16)
#undef EMBER_EMU_PLAIN

EMBER_EMU_HOOK void __tsan_read_range(void* p, unsigned long size) {
  on_access(p, size, true, false, false, __builtin_return_address(0));
}
EMBER_EMU_HOOK void __tsan_write_range(void* p, unsigned long size) {
  on_access(p, size, false, true, false, __builtin_return_address(0));
}
EMBER_EMU_HOOK void __tsan_init() {}
EMBER_EMU_HOOK void __tsan_func_entry(void*) {}
EMBER_EMU_HOOK void __tsan_func_exit() {}
EMBER_EMU_HOOK void __tsan_vptr_update(void**, void*) {}
EMBER_EMU_HOOK void __tsan_vptr_read(void**) {}

// Atomics: the operation itself (sequentially consistent, at least what was asked), seen
// by the checks as an atomic access.
#define EMBER_EMU_ATOMIC(n, T)                                                                            \
  EMBER_EMU_HOOK T __tsan_atomic##n##_load(const volatile T* a, int) {                                        \
    on_access(const_cast<T*>(a), sizeof(T), true, false, true, __builtin_return_address(0));              \
    return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                          \
  }                                                                                                       \
  EMBER_EMU_HOOK void __tsan_atomic##n##_store(volatile T* a, T v, int) {                                     \
    on_access(const_cast<T*>(a), sizeof(T), false, true, true, __builtin_return_address(0));              \
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                             \
  }                                                                                                       \
  EMBER_EMU_HOOK T __tsan_atomic##n##_exchange(volatile T* a, T v, int) {                                     \
    on_access(const_cast<T*>(a), sizeof(T), true, true, true, __builtin_return_address(0));               \
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                                   \
  }                                                                                                       \
  EMBER_EMU_ATOMIC_RMW(n, T, fetch_add)                                                                   \
  EMBER_EMU_ATOMIC_RMW(n, T, fetch_sub)                                                                   \
  EMBER_EMU_ATOMIC_RMW(n, T, fetch_and)                                                                   \
  EMBER_EMU_ATOMIC_RMW(n, T, fetch_or)                                                                    \
  EMBER_EMU_ATOMIC_RMW(n, T, fetch_xor)                                                                   \
  EMBER_EMU_ATOMIC_RMW(n, T, fetch_nand)                                                                  \
  EMBER_EMU_HOOK int __tsan_atomic##n##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {         \
    on_access(const_cast<T*>(a), sizeof(T), true, true, true, __builtin_return_address(0));               \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);               \
  }                                                                                                       \
  EMBER_EMU_HOOK int __tsan_atomic##n##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {           \
    on_access(const_cast<T*>(a), sizeof(T), true, true, true, __builtin_return_address(0));               \
    return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                \
  }                                                                                                       \
  EMBER_EMU_HOOK T __tsan_atomic##n##_compare_exchange_val(volatile T* a, T c, T v, int, int) {               \
    on_access(const_cast<T*>(a), sizeof(T), true, true, true, __builtin_return_address(0));               \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                     \
    return c;                                                                                             \
  }
#define EMBER_EMU_ATOMIC_RMW(n, T, op)                                                                    \
  EMBER_EMU_HOOK T __tsan_atomic##n##_##op(volatile T* a, T v, int) {                                         \
    on_access(const_cast<T*>(a), sizeof(T), true, true, true, __builtin_return_address(0));               \
    return __atomic_##op(a, v, __ATOMIC_SEQ_CST);                                                         \
  }
EMBER_EMU_ATOMIC(8, int8_t)
EMBER_EMU_ATOMIC(16, int16_t)
EMBER_EMU_ATOMIC(32, int32_t)
EMBER_EMU_ATOMIC(64, int64_t)
#undef EMBER_EMU_ATOMIC
#undef EMBER_EMU_ATOMIC_RMW

EMBER_EMU_HOOK void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
EMBER_EMU_HOOK void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
#undef EMBER_EMU_HOOK
