// Where a tensor lives: the CPU, CUDA device N, or the meta device (shapes and dtypes
// without data, core/meta.h).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

namespace ember {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1, Meta = 2 };
// Device types with kernels, hence op-table slots (core/dispatch.h): Meta has none, since
// ops on it only check their arguments and allocate their outputs.
inline constexpr int kNumBackendDeviceTypes = 2;

std::string_view device_type_name(DeviceType t);

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // the CUDA ordinal; always 0 for the CPU and meta

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(i) {}  // NOLINT
  // "cpu", "cuda", "cuda:1", "meta"; throws ember::Error on anything else.
  static Device parse(std::string_view s);
  static constexpr Device cpu() { return {DeviceType::CPU, 0}; }
  static constexpr Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  static constexpr Device meta() { return {DeviceType::Meta, 0}; }

  constexpr bool is_cpu() const { return type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type == DeviceType::CUDA; }
  constexpr bool is_meta() const { return type == DeviceType::Meta; }
  std::string str() const;
  friend constexpr bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }
};

std::ostream& operator<<(std::ostream& os, Device d);

// The device new tensors go to when their options name none (TensorOptions' default), as
// torch.set_default_device: the CPU unless set. Process-wide; set it before building a
// model so its parameters are made there. Code that needs host memory says Device::cpu().
Device default_device();
void set_default_device(Device device);

// Number of CUDA devices usable by this process: 0 without the CUDA backend, without a
// driver or without a GPU (never an error).
int cuda_device_count();

}  // namespace ember
