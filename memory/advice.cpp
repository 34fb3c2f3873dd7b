// The OutOfMemoryError's verdict and advice (Note [OOM verdict] in oom.h), from the figures
// the allocator gathered, in the words of the program (AdviceTerms).
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "memory/oom.h"

namespace ember::memory {
namespace {

constexpr std::size_t kMiB = std::size_t(1) << 20;

OomVerdict verdict_of(const OomReport& r) {
  if (r.rounded > r.cap) return OomVerdict::kImplausibleRequest;
  // The cap admitted a new segment; the device refused it: others hold the memory.
  if (r.reserved + r.segment <= r.cap) return OomVerdict::kOutsideMemory;
  // The cap refused the segment, and the device had room for it: the cap ran out first,
  // whatever ember's free memory under it looks like.
  if (r.cap_set && r.cap < r.device_total && r.device_free >= r.segment) return OomVerdict::kCap;
  const std::size_t room = r.cap > r.reserved ? r.cap - r.reserved : 0;  // under the cap, not reserved
  if (r.pool_free + room >= r.rounded) return OomVerdict::kFragmentation;
  return OomVerdict::kCapacity;
}

// The remedies that lower a step's footprint, those the program does not use yet.
std::string footprint_remedies(const AdviceTerms& t) {
  std::vector<std::string> ways;
  for (const std::string* w : {&t.checkpointing, &t.lower_precision})
    if (!w->empty()) ways.push_back(*w);
  ways.push_back("a smaller model");
  std::string s;
  for (size_t i = 0; i < ways.size(); ++i) s += (i == 0 ? "" : i + 1 == ways.size() ? " or " : ", ") + ways[i];
  return s;
}

// The batch that fits (the program's estimate, else the open step's upper bound) and the
// remedies, for the cap and capacity verdicts.
void smaller_step_advice(std::ostringstream& advice, const OomReport& r, const AdviceTerms& t, const char* where) {
  if (r.estimated_batch > 0)
    advice << "By the memory estimate (" << t.estimate << ") the largest batch whose step fits " << where << " is "
           << r.estimated_batch << " (" << t.batch_size << " " << r.estimated_batch << "). ";
  else if (r.estimated_batch == 0)
    advice << "By the memory estimate (" << t.estimate << ") not even a batch of 1 fits " << where << ". ";
  if (r.estimated_batch != 0) {
    if (!t.micro_batches.empty()) {
      if (r.batch_that_fits > 0 && r.batch_that_fits < r.batch)
        advice << "This step of " << r.batch << " samples would fit as micro-batches of at most about "
               << r.batch_that_fits << " samples with " << t.micro_batches << " (the same update); ";
      else
        advice << "Split the batch into micro-batches with " << t.micro_batches << " (the same update); ";
    } else if (r.batch_that_fits > 0 && r.batch_that_fits < r.batch) {
      advice << "This step of " << r.batch << " samples would fit at most about " << r.batch_that_fits << "; ";
    }
  }
  advice << footprint_remedies(t) << " also lower the footprint.";
}

}  // namespace

void advise(OomReport& r, const AdviceTerms& t) {
  r.verdict = verdict_of(r);
  if (r.cap_origin.empty()) r.cap_origin = t.cap_origin;
  // The program's estimate, asked once; an allocation inside it that fails too must not
  // ask again (it would recurse).
  static thread_local bool estimating = false;
  if ((r.verdict == OomVerdict::kCap || r.verdict == OomVerdict::kCapacity) && t.largest_batch && !estimating &&
      r.estimated_batch < 0) {
    estimating = true;
    try {
      r.estimated_batch = t.largest_batch(r.cap);
    } catch (...) {
      r.estimated_batch = -1;
    }
    estimating = false;
  }
  const std::string raise = t.raise_cap.empty() ? "" : " (" + t.raise_cap + ")";
  std::ostringstream advice;
  switch (r.verdict) {
    case OomVerdict::kImplausibleRequest: {
      const bool capped = r.cap < r.device_total;
      advice << "the request alone is larger than " << (capped ? "the cap" : "the whole device")
             << ": no amount of freeing makes it fit. Check the shape that asked for it (a wrong dimension, or a "
                "batch that should be split)"
             << (capped ? ", or raise the cap" + raise : "") << ".";
      break;
    }
    case OomVerdict::kOutsideMemory:
      advice << format_bytes(r.outside) << " of " << r.device
             << " is held outside ember (another process, or a library's workspace). Free it, or run where the "
                "device is not shared; ember itself holds only "
             << format_bytes(r.reserved) << ".";
      break;
    case OomVerdict::kFragmentation: {
      advice << format_bytes(r.pool_free) << " of the request's " << (r.small_pool ? "small" : "large")
             << " pool is free, enough with the room left under the cap, but in pieces: its largest free block is "
             << format_bytes(r.largest_free) << ". ";
      // max_split_size_mb keeps large blocks whole; it does nothing for the small pool, and
      // a value at or above the one in force changes nothing.
      const std::size_t split_mb = std::max<std::size_t>(21, (r.rounded >> 20) / 2 + 1);
      if (!r.small_pool && r.max_split_size > split_mb * kMiB)
        advice << "Set EMBER_ALLOC_CONF=max_split_size_mb:" << split_mb
               << " so that large blocks are not cut up for small requests, allocate";
      else if (!r.small_pool)
        advice << "max_split_size_mb is " << (r.max_split_size >> 20)
               << " already (EMBER_ALLOC_CONF); allocate";
      else
        advice << "Allocate";
      advice << " long-lived tensors first, and call empty_cache() between phases that use different shapes.";
      break;
    }
    case OomVerdict::kCap: {
      const std::size_t room = r.cap > r.reserved ? r.cap - r.reserved : 0;
      advice << "the cap is what ran out, not the device: it leaves " << format_bytes(room)
             << " beyond the " << format_bytes(r.reserved) << " ember holds, and this request needs a new segment of "
             << format_bytes(r.segment) << ", which the device, with " << format_bytes(r.device_free)
             << " free, had room for.";
      if (r.pool_free > 0)
        advice << " (" << format_bytes(r.pool_free) << " of the request's pool is free under the cap, but in pieces: "
               << "the largest is " << format_bytes(r.largest_free) << ".)";
      if (r.reserved_free > r.pool_free + r.awaiting_streams)
        advice << " (" << format_bytes(r.reserved_free - r.pool_free - r.awaiting_streams)
               << " of what ember holds is free but in the other pool's segments, held by live tensors: it cannot "
                  "serve this request.)";
      advice << " Raise the cap" << raise << ", or make the step fit under it. ";
      smaller_step_advice(advice, r, t, "under the cap");
      break;
    }
    case OomVerdict::kCapacity:
      advice << "live tensors fill the " << (r.cap_set ? "cap" : "device") << " (" << format_bytes(r.allocated)
             << " allocated). ";
      smaller_step_advice(advice, r, t, r.cap_set ? "under the cap" : "on the device");
      break;
  }
  if (r.awaiting_streams > 0)
    advice << " " << format_bytes(r.awaiting_streams) << " is freed but waits for other streams to finish with it.";
  if (r.capturing)
    advice << " A CUDA graph was being captured: cached memory is not returned to the device during a capture "
              "(cudaFree is not allowed then), so call empty_cache() before capture_begin, or capture a smaller step.";
  r.advice = advice.str();
}

}  // namespace ember::memory
