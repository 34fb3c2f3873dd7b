// Element types, their sizes and names, and PyTorch's type-promotion rules.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/half.h"

namespace ember {

enum class DType : uint8_t { Bool, UInt8, Int32, Int64, Float16, BFloat16, Float32, Float64 };
inline constexpr int kNumDTypes = 8;

inline constexpr DType kBool = DType::Bool;
inline constexpr DType kUInt8 = DType::UInt8;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;

constexpr int64_t element_size(DType t) {
  switch (t) {
    case DType::Bool:
    case DType::UInt8: return 1;
    case DType::Float16:
    case DType::BFloat16: return 2;
    case DType::Int32:
    case DType::Float32: return 4;
    case DType::Int64:
    case DType::Float64: return 8;
  }
  return 0;
}

constexpr bool is_floating(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 || t == DType::Float64;
}
constexpr bool is_integral(DType t) { return t == DType::UInt8 || t == DType::Int32 || t == DType::Int64; }

// "float32", "int64", ... as PyTorch spells them.
std::string_view dtype_name(DType t);
// Parses the names dtype_name gives (and "f32", "bf16", "fp16", ...); throws ember::Error.
DType parse_dtype(std::string_view name);

// The dtype of an op over two operands of these dtypes (PyTorch's promote_types):
// bool < integers < floats; within a category the wider type; float16 with bfloat16
// gives float32; uint8 with a signed integer gives the wider signed one.
DType promote_types(DType a, DType b);

// The C++ type that stores each dtype, and back.
template <DType D> struct dtype_traits;
template <> struct dtype_traits<DType::Bool> { using type = bool; };
template <> struct dtype_traits<DType::UInt8> { using type = uint8_t; };
template <> struct dtype_traits<DType::Int32> { using type = int32_t; };
template <> struct dtype_traits<DType::Int64> { using type = int64_t; };
template <> struct dtype_traits<DType::Float16> { using type = Half; };
template <> struct dtype_traits<DType::BFloat16> { using type = BFloat16; };
template <> struct dtype_traits<DType::Float32> { using type = float; };
template <> struct dtype_traits<DType::Float64> { using type = double; };

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::UInt8; }
template <> constexpr DType dtype_of<int32_t>() { return DType::Int32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }
template <> constexpr DType dtype_of<Half>() { return DType::Float16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::BFloat16; }
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }

}  // namespace ember
