// A memory source for tests: a device of fixed capacity on host memory, with memory held
// by "other processes" on demand, refusals and errors on demand, and streams whose events
// complete only when the test says so.
#pragma once

#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "base/error.h"
#include "memory/caching_allocator.h"

namespace ember::memory::testing {

struct FakeDeviceState {
  std::mutex mu;
  std::size_t capacity = 0, used = 0, outside = 0;  // outside: held by "other processes"
  int64_t raw_allocs = 0, raw_frees = 0;
  bool refuse = false;                 // every allocation fails
  std::string error;                   // when set, allocate raises it (a failure other than lack of memory)
  std::map<EventId, StreamId> events;  // outstanding
  std::set<StreamId> busy;             // streams whose events have not completed
  EventId next_event = 1;
  int64_t events_released = 0;
};

class FakeDevice final : public Source {
 public:
  using State = FakeDeviceState;

  // The test owns the state and changes it while the allocator runs.
  explicit FakeDevice(State& state) : s_(&state) {}

  void* allocate(std::size_t bytes) override {
    std::lock_guard lock(s_->mu);
    if (!s_->error.empty()) throw Error(s_->error);
    if (s_->refuse || s_->used + s_->outside + bytes > s_->capacity) return nullptr;
    void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (!p) return nullptr;
    s_->used += bytes;
    ++s_->raw_allocs;
    return p;
  }
  void free(void* ptr, std::size_t bytes) noexcept override {
    std::lock_guard lock(s_->mu);
    std::free(ptr);
    s_->used -= bytes;
    ++s_->raw_frees;
  }
  SourceInfo info() const noexcept override {
    std::lock_guard lock(s_->mu);
    return {s_->capacity - s_->used - s_->outside, s_->capacity};
  }
  std::string device_name() const override { return "fake:0"; }

  EventId record_event(StreamId stream) override {
    std::lock_guard lock(s_->mu);
    const EventId e = s_->next_event++;
    s_->events[e] = stream;
    return e;
  }
  bool event_done(EventId e) override {
    std::lock_guard lock(s_->mu);
    return !s_->busy.count(s_->events.at(e));
  }
  void wait_event(EventId e) override {
    std::lock_guard lock(s_->mu);
    s_->busy.erase(s_->events.at(e));  // "waiting" drains the stream
  }
  void release_event(EventId e) override {
    std::lock_guard lock(s_->mu);
    s_->events.erase(e);
    ++s_->events_released;
  }

 private:
  State* s_;
};

}  // namespace ember::memory::testing
