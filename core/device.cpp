#include "core/device.h"

#include <atomic>
#include <charconv>
#include <ostream>

#include "base/error.h"
#include "core/device_runtime.h"

namespace ember {

std::string_view device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::CPU: return "cpu";
    case DeviceType::CUDA: return "cuda";
    case DeviceType::Meta: return "meta";
  }
  return "unknown";
}

Device Device::parse(std::string_view s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s == "meta") return meta();
  if (s.starts_with("cuda:")) {
    std::string_view num = s.substr(5);
    int index = -1;
    auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), index);
    if (ec == std::errc() && end == num.data() + num.size() && !num.empty() && index >= 0)
      return cuda(index);
  }
  EMBER_FAIL("Device: cannot parse '", s, "' (expected cpu, cuda, cuda:N or meta)");
}

std::string Device::str() const {
  return is_cuda() ? "cuda:" + std::to_string(index) : std::string(device_type_name(type));
}

std::ostream& operator<<(std::ostream& os, Device d) { return os << d.str(); }

int cuda_device_count() { return kernels::cuda_device_count(); }

namespace {
std::atomic<uint16_t> g_default_device{0};  // type << 8 | index
}  // namespace

Device default_device() {
  const uint16_t v = g_default_device.load(std::memory_order_relaxed);
  return {static_cast<DeviceType>(v >> 8), v & 0xFF};
}

void set_default_device(Device device) {
  EMBER_CHECK(device.index >= 0 && device.index < 256, "set_default_device: device index ", device.index, " is out of range");
  g_default_device.store(static_cast<uint16_t>(static_cast<int>(device.type) << 8 | device.index), std::memory_order_relaxed);
}

}  // namespace ember
