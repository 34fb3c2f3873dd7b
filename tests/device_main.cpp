// The main() of the test binaries: GoogleTest's, plus the device the tests make their
// tensors on. EMBER_TEST_DEVICE=cuda (or cuda:N) makes it the default device
// (core/device.h), so the same tests run on the CUDA backend; ctest registers each test a
// second time that way, with the suffix .cuda, in the emulated-device build.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "ember.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (const char* device = std::getenv("EMBER_TEST_DEVICE")) {
    try {
      ember::set_default_device(ember::Device::parse(device));
    } catch (const ember::Error& e) {
      std::fprintf(stderr, "EMBER_TEST_DEVICE: %s\n", e.what());
      return 2;
    }
  }
  return RUN_ALL_TESTS();
}
