// What the emulated NCCL's tests share (test_nccl.cpp: ranks as threads;
// test_nccl_process.cpp: ranks as processes): the data types as the tests see them, each
// rank's inputs and their float64 or exact integer reductions, and device buffers.
#pragma once

#include <gtest/gtest.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/half.h"

namespace ember::emu_nccl_test {

inline constexpr size_t kSlotBytes = 8192;  // so kBig elements take several chunks
inline constexpr size_t kBig = 9000;
inline const std::vector<size_t> kCounts = {0, 1, 1023, kBig};
inline const ncclRedOp_t kOps[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};

// A data type as the tests see it: host values in and out as double.
struct Dtype {
  ncclDataType_t type;
  const char* name;
  size_t size;
  bool is_float;
  double tol;  // relative, for the float types
  std::function<void(void*, size_t, double)> set;
  std::function<double(const void*, size_t)> get;
  std::function<double(int64_t)> wrap;  // an integer result as the type holds it
};

template <class T>
inline Dtype make_dtype(ncclDataType_t type, const char* name, bool is_float, double tol) {
  return {type,
          name,
          sizeof(T),
          is_float,
          tol,
          [](void* p, size_t i, double v) { static_cast<T*>(p)[i] = static_cast<T>(static_cast<float>(v)); },
          [](const void* p, size_t i) { return static_cast<double>(static_cast<const T*>(p)[i]); },
          [](int64_t v) { return static_cast<double>(static_cast<T>(v)); }};
}
template <>
inline Dtype make_dtype<double>(ncclDataType_t type, const char* name, bool is_float, double tol) {
  return {type, name, 8, true, tol,
          [](void* p, size_t i, double v) { static_cast<double*>(p)[i] = v; },
          [](const void* p, size_t i) { return static_cast<const double*>(p)[i]; },
          [](int64_t v) { return static_cast<double>(v); }};
}

inline const std::vector<Dtype>& dtypes() {
  static const std::vector<Dtype> all = {
      make_dtype<int8_t>(ncclInt8, "int8", false, 0),
      make_dtype<uint8_t>(ncclUint8, "uint8", false, 0),
      make_dtype<int32_t>(ncclInt32, "int32", false, 0),
      make_dtype<uint32_t>(ncclUint32, "uint32", false, 0),
      make_dtype<int64_t>(ncclInt64, "int64", false, 0),
      make_dtype<uint64_t>(ncclUint64, "uint64", false, 0),
      make_dtype<ember::Half>(ncclFloat16, "float16", true, 2e-3),
      make_dtype<float>(ncclFloat32, "float32", true, 1e-6),
      make_dtype<double>(ncclFloat64, "float64", true, 1e-13),
      make_dtype<ember::BFloat16>(ncclBfloat16, "bfloat16", true, 1.6e-2),
  };
  return all;
}

// Rank r's input element i: small values, so sums and products of four stay exact in
// every float type and the integer products wrap only in the 8-bit types.
inline double input(const Dtype& d, int rank, size_t i) {
  const int v = static_cast<int>((static_cast<size_t>(rank) * 7 + i * 3) % 9);
  const bool is_unsigned = d.type == ncclUint8 || d.type == ncclUint32 || d.type == ncclUint64;
  if (is_unsigned) return v;
  return d.is_float ? (v - 4) * 0.5 : v - 4;
}

// The reduction of element i over ranks 0..n-1, in rank order, as the type holds it.
inline double reference(const Dtype& d, ncclRedOp_t op, int n, size_t i, size_t offset = 0) {
  if (d.is_float) {
    double acc = input(d, 0, i + offset);
    for (int r = 1; r < n; ++r) {
      const double v = input(d, r, i + offset);
      acc = op == ncclProd ? acc * v : op == ncclMax ? std::max(acc, v) : op == ncclMin ? std::min(acc, v) : acc + v;
    }
    return op == ncclAvg ? acc / n : acc;
  }
  auto acc = static_cast<int64_t>(input(d, 0, i + offset));
  for (int r = 1; r < n; ++r) {
    const auto v = static_cast<int64_t>(input(d, r, i + offset));
    acc = op == ncclProd ? acc * v : op == ncclMax ? std::max(acc, v) : op == ncclMin ? std::min(acc, v) : acc + v;
  }
  return d.wrap(op == ncclAvg ? acc / n : acc);
}

// Compares got[i] (host copy of a result) with want(i); one failure message per call.
inline void expect_matches(const Dtype& d, const std::vector<char>& got, size_t count, const std::function<double(size_t)>& want,
                    const std::string& what) {
  for (size_t i = 0; i < count; ++i) {
    const double g = d.get(got.data(), i), w = want(i);
    const bool ok = d.is_float ? std::abs(g - w) <= d.tol * std::max(1.0, std::abs(w)) : g == w;
    if (!ok) {
      ADD_FAILURE() << what << " " << d.name << ": element " << i << " of " << count << " is " << g << ", expected " << w;
      return;
    }
  }
}

#define NCCL_OK(call) ASSERT_EQ((call), ncclSuccess) << #call << ": " << ncclGetLastError(nullptr)
#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

inline bool segment_exists(const ncclUniqueId& id) {
  const char* name = id.internal + 8;  // after the magic and the slot size (kernels/emu/nccl.cpp)
  return access((std::string("/dev/shm") + name).c_str(), F_OK) == 0;
}

// A device buffer of `count` elements of d, filled with rank's inputs (from index
// `offset` on) by a copy queued on `stream`, so the collective after it must wait for it.
inline void* device_input(const Dtype& d, int rank, size_t count, cudaStream_t stream, size_t offset = 0) {
  void* p = nullptr;
  if (cudaMalloc(&p, std::max<size_t>(count, 1) * d.size) != cudaSuccess) return nullptr;
  std::vector<char> host(count * d.size);
  for (size_t i = 0; i < count; ++i) d.set(host.data(), i, input(d, rank, i + offset));
  cudaMemcpyAsync(p, host.data(), host.size(), cudaMemcpyHostToDevice, stream);  // pageable: staged
  return p;
}

inline std::vector<char> to_host(const void* p, size_t bytes, cudaStream_t stream) {
  std::vector<char> host(bytes);
  cudaStreamSynchronize(stream);
  if (bytes) cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost);
  return host;
}

// Work that keeps a stream busy for a while.
inline void slow_host_fn(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }

}  // namespace ember::emu_nccl_test
