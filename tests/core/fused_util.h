// Helpers of the fused-op tests (test_fused_*.cpp): inputs made on the CPU from a seeded
// generator and moved to the test's device, and the rounding unit of a dtype for the
// tolerances, which the tests derive from each op's error bound.
#pragma once

#include <cmath>
#include <string>

#include "core/dispatch.h"
#include "core/runtime.h"
#include "tests/device.h"
#include "ember.h"

namespace ember::test {

// Standard-normal values of `shape` (drawn on the CPU, so every device sees the same).
inline Tensor randn_on(const Shape& shape, DType dtype, uint64_t seed, double scale = 1.0) {
  Generator gen(seed);
  Tensor cpu = randn(shape, {kFloat64, Device::cpu()}, &gen);
  if (scale != 1.0) cpu = mul(cpu, Scalar(scale));
  return cpu.to(dtype).to(test_device());
}

// Integers in [lo, hi) of `shape`, int64, on the test device.
inline Tensor randint_on(int64_t lo, int64_t hi, const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randint(lo, hi, shape, {kInt64, Device::cpu()}, &gen).to(test_device());
}

// True when the test device can run `stub` (the gradient checks also need sum, mul and
// randn there): a slot another part of the backend has not filled yet is skipped, named.
inline bool device_has(const kernels::OpStubBase& stub) {
  init();  // the backends fill their slots here
  return stub.has(test_device().type);
}

#define EMBER_SKIP_WITHOUT(stub)                                                                             \
  do {                                                                                                       \
    if (!::ember::test::device_has(::ember::kernels::stub))                                                  \
      GTEST_SKIP() << #stub << " has no kernel on " << ::ember::test::test_device().str() << " in this build"; \
  } while (0)

}  // namespace ember::test
