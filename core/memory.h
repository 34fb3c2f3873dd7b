// Device memory as users see it: the caching allocator of each device, and shortcuts in
// the manner of torch.cuda.memory_*. The allocator itself is memory/caching_allocator.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "core/device.h"
#include "memory/caching_allocator.h"

namespace ember {

// The caching allocator every tensor on `device` comes from. Throws ember::Error for a
// CUDA device this process does not have.
memory::CachingAllocator& device_allocator(Device device);

// Statistics under PyTorch's keys ("allocated_bytes.all.current", ...).
std::map<std::string, int64_t> memory_stats(Device device = Device::cpu());
std::string memory_summary(Device device = Device::cpu());
void reset_peak_memory_stats(Device device = Device::cpu());
// Returns the device's cached, unused memory to the system (or the driver).
void empty_cache(Device device = Device::cpu());
// Caps what ember may reserve on the device (memory/caching_allocator.h).
void set_memory_fraction(double fraction, Device device = Device::cpu());
void set_memory_limit(std::size_t bytes, Device device = Device::cpu());

// The device's segments and their blocks, and its event history (see record_memory_history).
memory::Snapshot memory_snapshot(Device device = Device::cpu());
// That snapshot written atomically as JSON (memory/export.h), or as a
// Chrome/Perfetto trace when the path ends in ".trace.json". tools/memviz draws the JSON.
void save_memory_snapshot(const std::string& path, Device device = Device::cpu());
// Keeps the last `entries` allocation events of the device (0: stop); also turned on by
// EMBER_MEMORY_HISTORY=N.
void record_memory_history(std::size_t entries, Device device = Device::cpu());

// A size as users write it: "1048576" (bytes), "64MiB", "1.5GiB", "512KB", or a share of
// the device's capacity, "50%". Throws ember::Error naming the text when it is not one.
std::size_t parse_memory_size(const std::string& text, Device device = Device::cpu());

}  // namespace ember
