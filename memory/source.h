// Raw memory sources: where the caching allocator's segments come from.
//
// A source hands out large raw blocks (segments) and takes them back; the caching
// allocator (memory/caching_allocator.h) carves tensors out of them. Sources also answer
// for stream order: an event recorded on a stream, and whether it has completed, so that
// a block used on another stream is reused only once that stream is done with it. Host
// sources run every stream synchronously, so their events have always completed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ember::memory {

// A stream's identity: a cudaStream_t's value on CUDA; 0 is the default stream.
using StreamId = uint64_t;
using EventId = uint64_t;

struct SourceInfo {
  std::size_t free_bytes = 0;   // free on the device as its driver sees it, whoever uses the rest
  std::size_t total_bytes = 0;  // the device's capacity
};

class Source {
 public:
  virtual ~Source() = default;
  // A block of `bytes` (> 0) aligned to at least 512 bytes, or nullptr when the device
  // cannot supply it (the caching allocator then explains it as an OutOfMemoryError).
  // Raises ember::Error for a failure that is not lack of memory (a CUDA error), so that
  // it is not mistaken for one.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void free(void* ptr, std::size_t bytes) noexcept = 0;
  virtual SourceInfo info() const noexcept = 0;
  // "cpu", "cuda:0", "pinned": how messages name the device.
  virtual std::string device_name() const = 0;

  // Stream order. An event recorded now on `stream`; whether it has completed; waiting
  // for it; giving it back. The defaults are those of a synchronous (host) device.
  // (Parameter names in comments: a user's -Wunused-parameter sees these bodies.)
  virtual EventId record_event(StreamId /*stream*/) { return 0; }
  virtual bool event_done(EventId /*event*/) { return true; }
  virtual void wait_event(EventId /*event*/) {}
  virtual void release_event(EventId /*event*/) {}
};

// Host memory from the system (aligned_alloc). With a capacity (> 0) the source behaves
// like a device of that size: allocations beyond it fail and info() reports it; without
// one, info() reports the machine's physical and available memory.
std::unique_ptr<Source> make_host_source(std::size_t capacity = 0);

// Addresses without memory, for the meta device: allocate() hands out distinct, aligned,
// never dereferenced addresses, so a caching allocator over it takes exactly the
// decisions (rounding, splitting, reuse) it takes over a real source, for free.
// `capacity` as for the host source; 0: 2^60 bytes.
std::unique_ptr<Source> make_address_source(std::size_t capacity = 0);

}  // namespace ember::memory
