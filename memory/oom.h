// ember::OutOfMemoryError: an allocation failure that explains itself.
//
// Note [OOM verdict]. When an allocation fails after the cache has been released and the
// pressure observers have had their chance, the allocator gathers the figures below and
// names the one cause that explains the failure, in this order:
//   implausible request  the request alone is larger than the cap (or the device): no
//                        amount of freeing makes it fit;
//   memory outside ember the cap would have admitted the new segment, but the device
//                        refused it, and other users hold at least the missing amount;
//   the cap              a cap below the device's capacity refused the new segment that the
//                        device itself had room for: the cap, not the device, is what ran
//                        out (a --max-memory of 1 byte says so, not "fragmentation"; the
//                        advice mentions free pieces under the cap);
//   fragmentation        free blocks of the request's own pool, with the room left under
//                        the cap, add up to the request, but no single block is large
//                        enough (free blocks of the other pool never serve it);
//   capacity             live tensors really fill the device (or the cap, when the device
//                        is full too).
// Each verdict comes with the advice that fits it, in the program's words (AdviceTerms:
// the examples name their flags, a C++ program gets the C++ names), and never advice that
// would give the same report again: no max_split_size_mb at or above the one in force, no
// remedy the program already uses. The cap and capacity verdicts give the largest batch
// that fits when the program supplies its memory estimate. OutOfMemoryError is an
// ember::Error, whose header (base/error.h) lies below memory/ and depends on nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/error.h"

namespace ember {
namespace memory {

enum class OomVerdict { kImplausibleRequest, kOutsideMemory, kFragmentation, kCap, kCapacity };
const char* verdict_name(OomVerdict v);

struct LiveBlock {
  std::size_t bytes = 0;
  std::string op;     // the op that allocated it
  std::string shape;  // its output's shape, when known
};

// How a report names the remedies (Note [OOM verdict]). The defaults are the C++ API's
// names; a program sets its own with CachingAllocator::set_advice_terms (the examples: their
// flags). An empty remedy is left out: the program already uses it, and advising it would
// give the same report again.
struct AdviceTerms {
  std::string raise_cap = "set_memory_limit / set_memory_fraction";
  std::string micro_batches = "gradient accumulation over micro-batches (optim::MicroBatcher)";
  std::string checkpointing = "activation checkpointing (nn::checkpoint_blocks)";
  std::string lower_precision = "bf16 compute (AutocastScope(kBFloat16))";
  std::string batch_size = "a smaller batch";  // how to ask for a batch of N: "--batch-size"
  std::string estimate = "optim::memory_estimate";
  // What set the cap, for the report's "cap in force" line ("--max-memory 64MiB on top of
  // the 232 MiB held when training started"); empty: the API calls.
  std::string cap_origin;
  // The largest batch whose training step fits in `cap` bytes, from the program's memory
  // estimate (optim::max_batch_that_fits), or -1 when it cannot tell. Called without the
  // allocator's lock, once per report; an exception it throws is ignored.
  std::function<int64_t(std::size_t cap)> largest_batch;
};

struct OomReport {
  std::string device;               // "cuda:0", "cpu"
  std::size_t requested = 0;        // what the caller asked for (not rounded)
  std::string op, shape;            // who asked
  std::size_t device_total = 0;     // the device's capacity
  std::size_t cap = 0;              // the cap in force (the device's capacity when none is set)
  bool cap_set = false;             // set_memory_fraction / set_memory_limit in force
  std::size_t device_free = 0;      // free on the device, as its driver sees it
  std::size_t outside = 0;          // used on the device by others than this allocator
  std::size_t allocated = 0;        // by ember, live
  std::size_t reserved = 0;         // by ember, from the device
  std::size_t reserved_free = 0;    // reserved but unallocated
  bool small_pool = false;          // the request's pool: small (up to 1 MiB) or large
  std::size_t pool_free = 0;        // free in the request's pool (and stream), in all
  std::size_t largest_free = 0;     // the largest of those blocks
  std::size_t awaiting_streams = 0; // freed, waiting on other streams before reuse
  bool capturing = false;           // a CUDA graph capture was under way: nothing was released
  std::size_t rounded = 0;          // the request as the allocator rounds it
  std::size_t segment = 0;          // the new segment the request needed
  std::size_t max_split_size = 0;   // max_split_size_mb in force, in bytes (SIZE_MAX: none)
  std::string cap_origin;           // what set the cap (AdviceTerms::cap_origin)
  int64_t estimated_batch = -1;     // the largest batch that fits the cap, by the program's estimate; -1: unknown
  std::vector<LiveBlock> largest_live;  // the five largest live allocations
  int64_t batch = 0;                // samples in the training step, when one was open
  // When a step was open: the largest batch whose step's allocations so far would fit,
  // an upper bound (the step was not finished); at least `batch` when it ran out too
  // early to tell. 0 when no step was open.
  int64_t batch_that_fits = 0;
  OomVerdict verdict = OomVerdict::kCapacity;
  std::string advice;
  std::vector<std::string> notes;   // the allocator's report notes (add_report_note)

  // The whole message: figures, verdict, advice.
  std::string message() const;
};

// "1.50 GiB (1610612736 bytes)"
std::string format_bytes(std::size_t bytes);

// Sets the report's verdict and advice from its figures (Note [OOM verdict]), in `terms`.
void advise(OomReport& report, const AdviceTerms& terms);

}  // namespace memory

class OutOfMemoryError : public Error {
 public:
  explicit OutOfMemoryError(memory::OomReport report) : Error(report.message()), report_(std::move(report)) {}
  const memory::OomReport& report() const { return report_; }

 private:
  memory::OomReport report_;
};

}  // namespace ember
