// Every primitive op of core/dispatch.h has a kernel in every backend this build has:
// the CPU's and, in a build with CUDA (real or emulated), the CUDA backend's.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "base/error.h"
#include "core/device_runtime.h"
#include "core/dispatch.h"
#include "core/runtime.h"

namespace {

std::string missing_ops(ember::DeviceType d) {
  std::string missing;
  for (const auto* stub : ember::kernels::all_stubs())
    if (!stub->has(d)) missing += std::string(missing.empty() ? "" : ", ") + stub->name();
  return missing;
}

TEST(OpCoverage, CpuBackendHasEveryOp) {
  ember::init();
  EXPECT_EQ(missing_ops(ember::DeviceType::CPU), "") << "ops without a CPU kernel";
}

TEST(OpCoverage, CudaBackendHasEveryOp) {
  ember::init();
  if (!ember::kernels::cuda_backend_built()) GTEST_SKIP() << "this build has no CUDA backend";
  EXPECT_EQ(missing_ops(ember::DeviceType::CUDA), "") << "ops without a CUDA kernel";
}

TEST(OpCoverage, MissingKernelIsALoudError) {
  ember::init();
  const ember::kernels::OpStub<ember::kernels::UnaryFn> unregistered{"unregistered_op"};
  try {
    unregistered.get(ember::DeviceType::CUDA);
    FAIL() << "expected an ember::Error";
  } catch (const ember::Error& e) {
    EXPECT_STREQ(e.what(), "unregistered_op: no kernel is registered for device type cuda");
  }
}

TEST(OpCoverage, StubNamesAreUnique) {
  std::set<std::string> names;
  for (const auto* stub : ember::kernels::all_stubs()) EXPECT_TRUE(names.insert(stub->name()).second) << stub->name();
  EXPECT_GE(names.size(), 40u);
}

}  // namespace
