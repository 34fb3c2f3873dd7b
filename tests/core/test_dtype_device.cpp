// Tests of the dtype system (promotion, sizes, names), the 16-bit float types (known
// values, exhaustive round trips, round-to-nearest-even ties) and Device parsing.
//
// Note [Exhaustive 16-bit checks]: there are only 65536 bit patterns, so every one is
// converted to float and back, and every midpoint between neighbouring values is
// checked to round to the even neighbour. Both loops take well under a millisecond.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/device.h"
#include "core/device_runtime.h"
#include "core/dtype.h"
#include "core/half.h"

#include "tests/core/reference.h"

namespace ember {
namespace {

using test::error_message;
using test::values;


// True when `s` appears in `msg` between quotes ('s', "s" or `s`).
bool quotes(const std::string& msg, const std::string& s) {
  for (char q : {'\'', '"', '`'})
    if (msg.find(std::string(1, q) + s + q) != std::string::npos) return true;
  return false;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ----- promotion -----

TEST(PromoteTypes, FullTableMatchesPyTorch) {
  // Rows and columns in the DType enum order: b, u8, i32, i64, f16, bf16, f32, f64.
  // Values are torch.promote_types(row, col).
  constexpr DType b = kBool, u8 = kUInt8, i32 = kInt32, i64 = kInt64, f16 = kFloat16,
                  bf = kBFloat16, f32 = kFloat32, f64 = kFloat64;
  const DType all[kNumDTypes] = {b, u8, i32, i64, f16, bf, f32, f64};
  const DType expected[kNumDTypes][kNumDTypes] = {
      /* b   */ {b, u8, i32, i64, f16, bf, f32, f64},
      /* u8  */ {u8, u8, i32, i64, f16, bf, f32, f64},
      /* i32 */ {i32, i32, i32, i64, f16, bf, f32, f64},
      /* i64 */ {i64, i64, i64, i64, f16, bf, f32, f64},
      /* f16 */ {f16, f16, f16, f16, f16, f32, f32, f64},
      /* bf  */ {bf, bf, bf, bf, f32, bf, f32, f64},
      /* f32 */ {f32, f32, f32, f32, f32, f32, f32, f64},
      /* f64 */ {f64, f64, f64, f64, f64, f64, f64, f64},
  };
  for (int i = 0; i < kNumDTypes; ++i)
    for (int j = 0; j < kNumDTypes; ++j)
      EXPECT_EQ(promote_types(all[i], all[j]), expected[i][j])
          << dtype_name(all[i]) << " + " << dtype_name(all[j]) << " gave "
          << dtype_name(promote_types(all[i], all[j])) << ", expected " << dtype_name(expected[i][j]);
}

TEST(PromoteTypes, NamedRules) {
  EXPECT_EQ(promote_types(kUInt8, kInt32), kInt32);
  EXPECT_EQ(promote_types(kInt32, kUInt8), kInt32);
  EXPECT_EQ(promote_types(kInt32, kInt64), kInt64);
  EXPECT_EQ(promote_types(kFloat16, kBFloat16), kFloat32);
  EXPECT_EQ(promote_types(kBFloat16, kFloat16), kFloat32);
  EXPECT_EQ(promote_types(kFloat16, kFloat32), kFloat32);
  EXPECT_EQ(promote_types(kInt64, kFloat16), kFloat16);  // a float beats any integer
  EXPECT_EQ(promote_types(kInt32, kBFloat16), kBFloat16);
  EXPECT_EQ(promote_types(kBool, kUInt8), kUInt8);
  EXPECT_EQ(promote_types(kBool, kBool), kBool);
  for (int i = 0; i < kNumDTypes; ++i) {
    DType t = static_cast<DType>(i);
    EXPECT_EQ(promote_types(t, kFloat64), kFloat64) << dtype_name(t);
    EXPECT_EQ(promote_types(kFloat64, t), kFloat64) << dtype_name(t);
    EXPECT_EQ(promote_types(t, t), t) << dtype_name(t);
    EXPECT_EQ(promote_types(kBool, t), t) << dtype_name(t);
  }
}

// ----- sizes and names -----

TEST(DType, ElementSizeMatchesStorageType) {
  EXPECT_EQ(element_size(kBool), 1);
  EXPECT_EQ(element_size(kUInt8), 1);
  EXPECT_EQ(element_size(kInt32), 4);
  EXPECT_EQ(element_size(kInt64), 8);
  EXPECT_EQ(element_size(kFloat16), 2);
  EXPECT_EQ(element_size(kBFloat16), 2);
  EXPECT_EQ(element_size(kFloat32), 4);
  EXPECT_EQ(element_size(kFloat64), 8);
  static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);
  static_assert(element_size(dtype_of<dtype_traits<kInt64>::type>()) == sizeof(int64_t));
  static_assert(element_size(dtype_of<dtype_traits<kFloat16>::type>()) == sizeof(Half));
}

TEST(DType, Categories) {
  EXPECT_FALSE(is_floating(kBool));
  EXPECT_FALSE(is_integral(kBool));
  for (DType t : {kUInt8, kInt32, kInt64}) {
    EXPECT_TRUE(is_integral(t)) << dtype_name(t);
    EXPECT_FALSE(is_floating(t)) << dtype_name(t);
  }
  for (DType t : {kFloat16, kBFloat16, kFloat32, kFloat64}) {
    EXPECT_TRUE(is_floating(t)) << dtype_name(t);
    EXPECT_FALSE(is_integral(t)) << dtype_name(t);
  }
}

TEST(DType, NamesAreTorchSpellingsAndRoundTrip) {
  const char* names[kNumDTypes] = {"bool", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"};
  for (int i = 0; i < kNumDTypes; ++i) {
    DType t = static_cast<DType>(i);
    EXPECT_EQ(dtype_name(t), names[i]);
    EXPECT_EQ(parse_dtype(dtype_name(t)), t) << names[i];
  }
}

TEST(DType, ParseAcceptsShortAliases) {
  EXPECT_EQ(parse_dtype("f32"), kFloat32);
  EXPECT_EQ(parse_dtype("bf16"), kBFloat16);
  EXPECT_EQ(parse_dtype("fp16"), kFloat16);
}

TEST(DType, ParseRejectsUnknownNameAndQuotesIt) {
  for (const char* bad : {"float33", "", "Float32x", "int128"}) {
    std::string msg = error_message([&] { parse_dtype(bad); });
    EXPECT_TRUE(quotes(msg, bad)) << "message should quote '" << bad << "': " << msg;
  }
}

// ----- Half -----

TEST(Half, KnownValues) {
  EXPECT_EQ(Half(1.0f).bits, 0x3c00);
  EXPECT_EQ(Half(-2.5f).bits, 0xc100);
  EXPECT_EQ(Half(0.0f).bits, 0x0000);
  EXPECT_EQ(Half(-0.0f).bits, 0x8000);
  EXPECT_EQ(Half(65504.0f).bits, 0x7bff);  // the largest finite half
  EXPECT_EQ(float(Half::from_bits(0x7bff)), 65504.0f);
  EXPECT_EQ(Half(65519.996f).bits, 0x7bff);  // just below the midpoint to infinity
  EXPECT_EQ(Half(65520.0f).bits, 0x7c00);    // the midpoint rounds (to even) to infinity
  EXPECT_EQ(Half(-65520.0f).bits, 0xfc00);
  EXPECT_EQ(Half(1e6f).bits, 0x7c00);
  EXPECT_EQ(Half(std::numeric_limits<float>::max()).bits, 0x7c00);
  EXPECT_EQ(Half(std::ldexp(1.0f, -14)).bits, 0x0400);  // smallest normal
  EXPECT_EQ(Half(std::ldexp(1023.0f, -24)).bits, 0x03ff);  // largest subnormal
  EXPECT_EQ(Half(std::ldexp(1.0f, -24)).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(float(Half::from_bits(0x0001)), std::ldexp(1.0f, -24));
  EXPECT_EQ(float(Half::from_bits(0x8001)), -std::ldexp(1.0f, -24));
  EXPECT_EQ(Half(std::ldexp(1.0f, -26)).bits, 0x0000);  // underflows to zero
  EXPECT_EQ(Half(-std::ldexp(1.0f, -26)).bits, 0x8000);  // ...keeping the sign
  // 0.1 = 1.6 * 2^-4: mantissa 0.6 * 1024 = 614.4 rounds down to 614 (0x266).
  EXPECT_EQ(Half(0.1f).bits, 0x2e66);
  EXPECT_EQ(float(Half(0.1f)), 0.0999755859375f);
}

TEST(Half, InfinityAndNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Half(inf).bits, 0x7c00);
  EXPECT_EQ(Half(-inf).bits, 0xfc00);
  EXPECT_EQ(float(Half::from_bits(0x7c00)), inf);
  EXPECT_EQ(float(Half::from_bits(0xfc00)), -inf);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Half h(nan);
  EXPECT_EQ(h.bits & 0x7c00, 0x7c00);
  EXPECT_NE(h.bits & 0x03ff, 0) << "NaN must not become infinity";
  EXPECT_TRUE(std::isnan(float(h)));
  EXPECT_TRUE(std::isnan(float(Half(-nan))));
  // A signalling-style float NaN whose payload lives only in the low mantissa bits (which
  // a naive truncation would drop, turning it into infinity).
  float low_payload_nan;
  uint32_t u = 0x7f800001u;
  std::memcpy(&low_payload_nan, &u, 4);
  EXPECT_TRUE(std::isnan(float(Half(low_payload_nan))));
}

TEST(Half, EveryBitPatternRoundTripsThroughFloat) {
  int nan_patterns = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    Half h = Half::from_bits(static_cast<uint16_t>(b));
    float f = h;
    Half back(f);
    bool is_nan = (b & 0x7c00) == 0x7c00 && (b & 0x03ff) != 0;
    if (is_nan) {
      ++nan_patterns;
      ASSERT_TRUE(std::isnan(f)) << std::hex << "pattern 0x" << b;
      ASSERT_TRUE(std::isnan(float(back))) << std::hex << "pattern 0x" << b;
      ASSERT_EQ(back.bits & 0x8000, b & 0x8000) << std::hex << "NaN sign of 0x" << b;
    } else {
      ASSERT_FALSE(std::isnan(f)) << std::hex << "pattern 0x" << b;
      ASSERT_EQ(back.bits, b) << std::hex << "pattern 0x" << b << " -> " << f << " -> 0x" << back.bits;
    }
  }
  EXPECT_EQ(nan_patterns, 2 * 1023);
}

TEST(Half, ConversionToFloatIsExactAndMonotonic) {
  // Positive patterns 0x0000..0x7c00 are increasing values; each step is one ulp.
  float prev = float(Half::from_bits(0));
  EXPECT_EQ(bits_of(prev), 0u);
  for (uint32_t b = 1; b <= 0x7c00; ++b) {
    float f = Half::from_bits(static_cast<uint16_t>(b));
    ASSERT_GT(f, prev) << std::hex << "pattern 0x" << b;
    ASSERT_EQ(float(Half::from_bits(static_cast<uint16_t>(b | 0x8000))), -f) << std::hex << "pattern 0x" << b;
    prev = f;
  }
}

TEST(Half, RoundsToNearestEvenAtEveryMidpoint) {
  // See Note [Exhaustive 16-bit checks]. Between neighbours lo < hi the exact midpoint
  // (representable in float: it needs 12 significant bits) goes to whichever has an even
  // mantissa; anything above or below the midpoint goes to the nearer one.
  for (uint32_t b = 0; b < 0x7bff; ++b) {
    float lo = Half::from_bits(static_cast<uint16_t>(b));
    float hi = Half::from_bits(static_cast<uint16_t>(b + 1));
    float mid = lo + (hi - lo) / 2;
    ASSERT_GT(mid, lo);
    ASSERT_LT(mid, hi);
    uint32_t even = (b & 1) ? b + 1 : b;
    ASSERT_EQ(Half(mid).bits, even) << std::hex << "midpoint after 0x" << b << " (" << mid << ")";
    ASSERT_EQ(Half(-mid).bits, even | 0x8000) << std::hex << "negative midpoint after 0x" << b;
    ASSERT_EQ(Half(std::nextafter(mid, hi)).bits, b + 1) << std::hex << "above midpoint after 0x" << b;
    ASSERT_EQ(Half(std::nextafter(mid, lo)).bits, b) << std::hex << "below midpoint after 0x" << b;
  }
}

TEST(Half, NamedTies) {
  // ulp(1) = 2^-10; 1 + 2^-11 is halfway between 1 (even) and 1 + 2^-10 (odd).
  EXPECT_EQ(Half(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  EXPECT_EQ(Half(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3c02);
  // Subnormal ties: 2^-25 is halfway between 0 and 2^-24; 3 * 2^-25 between 2^-24 and 2^-23.
  EXPECT_EQ(Half(std::ldexp(1.0f, -25)).bits, 0x0000);
  EXPECT_EQ(Half(std::ldexp(3.0f, -25)).bits, 0x0002);
  EXPECT_EQ(Half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)).bits, 0x0001);
  // 2048 + 1 is halfway between 2048 and 2050 (ulp 2 above 2048).
  EXPECT_EQ(Half(2049.0f).bits, Half(2048.0f).bits);
  EXPECT_EQ(Half(2051.0f).bits, Half(2052.0f).bits);
}

// ----- BFloat16 -----

TEST(BFloat16, KnownValues) {
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(BFloat16(-2.5f).bits, 0xc020);
  EXPECT_EQ(BFloat16(0.0f).bits, 0x0000);
  EXPECT_EQ(BFloat16(-0.0f).bits, 0x8000);
  // 0.1f = 0x3dcccccd: the dropped half 0xcccd is above 0x8000, so it rounds up.
  EXPECT_EQ(BFloat16(0.1f).bits, 0x3dcd);
  EXPECT_EQ(float(BFloat16(0.1f)), 0.10009765625f);
  // 65504 is exact in half, not in bfloat16 (8 significant bits): 65536 is nearest.
  EXPECT_EQ(float(BFloat16(65504.0f)), 65536.0f);
  EXPECT_EQ(bits_of(BFloat16::from_bits(0x7f7f)), 0x7f7f0000u);  // largest finite, 3.3895e38
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::max()).bits, 0x7f80);  // rounds up to inf
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::denorm_min()).bits, 0x0000);
  EXPECT_EQ(float(BFloat16::from_bits(0x0001)), std::ldexp(1.0f, -133));  // subnormal
}

TEST(BFloat16, InfinityAndNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(BFloat16(inf).bits, 0x7f80);
  EXPECT_EQ(BFloat16(-inf).bits, 0xff80);
  EXPECT_EQ(float(BFloat16::from_bits(0xff80)), -inf);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(float(BFloat16(nan))));
  EXPECT_TRUE(std::isnan(float(BFloat16(-nan))));
  // Payload only in the low 16 bits: truncating (or rounding) would give infinity.
  for (uint32_t u : {0x7f800001u, 0x7f80ffffu, 0xff800001u, 0x7fffffffu}) {
    float f;
    std::memcpy(&f, &u, 4);
    BFloat16 b(f);
    EXPECT_TRUE(std::isnan(float(b))) << std::hex << "float 0x" << u << " -> 0x" << b.bits;
    EXPECT_EQ(b.bits & 0x8000, (u >> 16) & 0x8000) << std::hex << "sign of 0x" << u;
  }
}

TEST(BFloat16, EveryBitPatternRoundTripsThroughFloat) {
  int nan_patterns = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    BFloat16 h = BFloat16::from_bits(static_cast<uint16_t>(b));
    float f = h;
    ASSERT_EQ(bits_of(f), b << 16) << std::hex << "pattern 0x" << b;  // widening is exact
    BFloat16 back(f);
    bool is_nan = (b & 0x7f80) == 0x7f80 && (b & 0x007f) != 0;
    if (is_nan) {
      ++nan_patterns;
      ASSERT_TRUE(std::isnan(float(back))) << std::hex << "pattern 0x" << b;
      ASSERT_EQ(back.bits & 0x8000, b & 0x8000) << std::hex << "NaN sign of 0x" << b;
    } else {
      ASSERT_EQ(back.bits, b) << std::hex << "pattern 0x" << b;
    }
  }
  EXPECT_EQ(nan_patterns, 2 * 127);
}

TEST(BFloat16, RoundsToNearestEvenAtEveryMidpoint) {
  // As for Half (Note [Exhaustive 16-bit checks]); bfloat16 subnormals are float subnormals.
  for (uint32_t b = 0; b < 0x7f7f; ++b) {
    float lo = BFloat16::from_bits(static_cast<uint16_t>(b));
    float hi = BFloat16::from_bits(static_cast<uint16_t>(b + 1));
    float mid = lo + (hi - lo) / 2;
    uint32_t even = (b & 1) ? b + 1 : b;
    ASSERT_EQ(BFloat16(mid).bits, even) << std::hex << "midpoint after 0x" << b;
    ASSERT_EQ(BFloat16(-mid).bits, even | 0x8000) << std::hex << "negative midpoint after 0x" << b;
    ASSERT_EQ(BFloat16(std::nextafter(mid, hi)).bits, b + 1) << std::hex << "above midpoint after 0x" << b;
    ASSERT_EQ(BFloat16(std::nextafter(mid, lo)).bits, b) << std::hex << "below midpoint after 0x" << b;
  }
  // The midpoint between the largest finite value and the next power of two overflows.
  float max_finite = BFloat16::from_bits(0x7f7f);
  float top_mid = max_finite + std::ldexp(1.0f, 127 - 8);
  EXPECT_EQ(BFloat16(top_mid).bits, 0x7f80);
  EXPECT_EQ(BFloat16(std::nextafter(top_mid, 0.0f)).bits, 0x7f7f);
}

TEST(BFloat16, NamedTies) {
  // ulp(1) = 2^-7: 1 + 2^-8 ties to 1 (even); 1 + 3 * 2^-8 ties to 1 + 2^-6 (even).
  EXPECT_EQ(BFloat16(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80);
  EXPECT_EQ(BFloat16(1.0f + 3 * std::ldexp(1.0f, -8)).bits, 0x3f82);
  EXPECT_EQ(BFloat16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)).bits, 0x3f81);
}

// ----- Device -----

TEST(Device, ParsesValidStrings) {
  Device cpu = Device::parse("cpu");
  EXPECT_TRUE(cpu.is_cpu());
  EXPECT_EQ(cpu, Device::cpu());
  Device cuda = Device::parse("cuda");
  EXPECT_TRUE(cuda.is_cuda());
  EXPECT_EQ(cuda.index, 0);
  EXPECT_EQ(Device::parse("cuda:0"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:1"), Device::cuda(1));
  EXPECT_EQ(Device::parse("cuda:12"), Device::cuda(12));
  EXPECT_FALSE(Device::parse("cuda:1") == Device::cuda(0));
  EXPECT_FALSE(Device::cpu() == Device::cuda(0));
}

TEST(Device, StrAndStreamRoundTrip) {
  EXPECT_EQ(Device::cpu().str(), "cpu");
  EXPECT_EQ(Device::cuda(1).str(), "cuda:1");
  std::ostringstream os;
  os << Device::cuda(3);
  EXPECT_EQ(os.str(), "cuda:3");
  for (Device d : {Device::cpu(), Device::cuda(0), Device::cuda(7)}) EXPECT_EQ(Device::parse(d.str()), d);
  EXPECT_EQ(device_type_name(DeviceType::CPU), "cpu");
  EXPECT_EQ(device_type_name(DeviceType::CUDA), "cuda");
}

TEST(Device, RejectsBadStringsAndQuotesThem) {
  for (const char* bad : {"cuda:-1", "gpu", "cuda:x", "cuda:", "cuda:1x", "cpu:0x", "", " cpu", "cuda:1.5"}) {
    std::string msg = error_message([&] { Device::parse(bad); });
    EXPECT_TRUE(quotes(msg, bad)) << "message should quote '" << bad << "': " << msg;
  }
}

TEST(Device, CudaDeviceCountIsSane) {
  int n = cuda_device_count();
  EXPECT_GE(n, 0);
  EXPECT_EQ(n, kernels::cuda_device_count());
  if (!kernels::cuda_backend_built()) {
    EXPECT_EQ(n, 0) << "a CPU-only build reports no GPUs";
  }
  EXPECT_EQ(cuda_device_count(), n) << "the count is stable across calls";
}

}  // namespace
}  // namespace ember
