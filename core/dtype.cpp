#include "core/dtype.h"

#include <string>

#include "base/error.h"

namespace ember {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::UInt8: return "uint8";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  struct Alias { std::string_view name; DType dtype; };
  static constexpr Alias kAliases[] = {
      {"bool", kBool},       {"uint8", kUInt8},       {"int32", kInt32},     {"int", kInt32},
      {"int64", kInt64},     {"long", kInt64},        {"float16", kFloat16}, {"f16", kFloat16},
      {"fp16", kFloat16},    {"half", kFloat16},      {"bfloat16", kBFloat16}, {"bf16", kBFloat16},
      {"float32", kFloat32}, {"f32", kFloat32},       {"fp32", kFloat32},    {"float", kFloat32},
      {"float64", kFloat64}, {"f64", kFloat64},       {"fp64", kFloat64},    {"double", kFloat64},
  };
  for (const Alias& a : kAliases)
    if (a.name == name) return a.dtype;
  EMBER_FAIL("parse_dtype: unknown dtype '", name,
             "' (expected one of bool, uint8, int32, int64, float16, bfloat16, float32, float64)");
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  if (is_floating(a) != is_floating(b)) return is_floating(a) ? a : b;
  if (is_floating(a)) {
    if (a == DType::Float64 || b == DType::Float64) return DType::Float64;
    return DType::Float32;  // f16+bf16, f16+f32, bf16+f32
  }
  // Two different integer types: the enum orders them by width, uint8 first.
  return a > b ? a : b;
}

}  // namespace ember
