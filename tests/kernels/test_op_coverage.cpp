// Every primitive op of core/dispatch.h has a kernel in every backend this build has
// registered kernels for. The CPU backend must be complete; the CUDA backend's gaps are
// listed (it is not complete yet) so that a missing op is visible by name.
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

TEST(OpCoverage, CudaBackendGapsAreListed) {
  ember::init();
  if (!ember::kernels::cuda_backend_built()) GTEST_SKIP() << "this build has no CUDA backend";
  const std::string missing = missing_ops(ember::DeviceType::CUDA);
  std::printf("ops without a CUDA kernel: %s\n", missing.empty() ? "none" : missing.c_str());
  if (ember::cuda_device_count() == 0) GTEST_SKIP() << "no GPU: CUDA kernels are listed above, not run";
}

TEST(OpCoverage, MissingKernelIsALoudError) {
  ember::init();
  if (ember::kernels::add_stub.has(ember::DeviceType::CUDA)) GTEST_SKIP() << "add has a CUDA kernel in this build";
  try {
    ember::kernels::add_stub.get(ember::DeviceType::CUDA);
    FAIL() << "expected an ember::Error";
  } catch (const ember::Error& e) {
    EXPECT_STREQ(e.what(), "add: no kernel is registered for device type cuda");
  }
}

TEST(OpCoverage, StubNamesAreUnique) {
  std::set<std::string> names;
  for (const auto* stub : ember::kernels::all_stubs()) EXPECT_TRUE(names.insert(stub->name()).second) << stub->name();
  EXPECT_GE(names.size(), 40u);
}

}  // namespace
