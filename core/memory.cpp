#include "core/memory.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "base/error.h"
#include "core/atomic_file.h"
#include "core/device_runtime.h"
#include "memory/export.h"

namespace ember {

memory::CachingAllocator& device_allocator(Device device) {
  if (device.is_cpu()) return memory::host_allocator();
  if (device.is_meta()) {
    static auto* meta = new memory::CachingAllocator(memory::make_address_source());  // lives for the process
    return *meta;
  }
  const int count = kernels::cuda_device_count();
  EMBER_CHECK(device.index < count, "cannot use ", device.str(), ": ",
              count == 0 ? std::string("no CUDA device is available")
                         : detail::str("this process sees ", count, " CUDA device(s)"));
  return kernels::cuda_allocator(device.index);
}

std::map<std::string, int64_t> memory_stats(Device device) { return device_allocator(device).stats().to_map(); }
std::string memory_summary(Device device) { return device_allocator(device).summary(); }
void reset_peak_memory_stats(Device device) { device_allocator(device).reset_peak_stats(); }
void empty_cache(Device device) { device_allocator(device).empty_cache(); }
void set_memory_fraction(double fraction, Device device) { device_allocator(device).set_memory_fraction(fraction); }
void set_memory_limit(std::size_t bytes, Device device) { device_allocator(device).set_memory_limit(bytes); }

memory::Snapshot memory_snapshot(Device device) { return device_allocator(device).snapshot(); }

void save_memory_snapshot(const std::string& path, Device device) {
  const memory::Snapshot snap = memory_snapshot(device);
  const bool trace = path.size() >= 11 && path.compare(path.size() - 11, 11, ".trace.json") == 0;
  write_file_atomically(path, trace ? memory::to_chrome_trace(snap) : memory::to_json(snap), "save_memory_snapshot");
}

void record_memory_history(std::size_t entries, Device device) { device_allocator(device).record_history(entries); }

std::size_t parse_memory_size(const std::string& text, Device device) {
  auto fail = [&] {
    EMBER_FAIL("memory size '", text,
               "': expected bytes (1048576), a size with a unit (64MiB, 1.5GiB, 512KB) or a share of the device (50%)");
  };
  if (text.find('\0') != std::string::npos) fail();  // strtod would stop there and ignore the rest
  const char* s = text.c_str();
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (end == s || !std::isfinite(v) || v <= 0) fail();
  std::string unit(end);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double bytes = 0;
  if (unit == "%") {
    if (v > 100) fail();
    const memory::SourceInfo info = device_allocator(device).source().info();
    bytes = v / 100 * static_cast<double>(info.total_bytes);
  } else {
    const std::pair<const char*, double> units[] = {
        {"", 1},          {"b", 1},           {"k", 1024.0},      {"kb", 1024.0}, {"kib", 1024.0},
        {"m", 1048576.0}, {"mb", 1048576.0},  {"mib", 1048576.0}, {"g", 1073741824.0},
        {"gb", 1073741824.0}, {"gib", 1073741824.0}, {"t", 1099511627776.0}, {"tb", 1099511627776.0},
        {"tib", 1099511627776.0}};
    bool found = false;
    for (const auto& [name, scale] : units)
      if (unit == name) {
        bytes = v * scale;
        found = true;
      }
    if (!found) fail();
  }
  // Beyond size_t the cast below is undefined ("1e30", "20000000TiB"): an error, not a wrapped size.
  if (bytes < 1 || bytes >= 18446744073709551616.0) fail();
  return static_cast<std::size_t>(bytes);
}

}  // namespace ember
