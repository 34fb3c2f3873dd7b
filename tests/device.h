// The device a test runs on (tests/device_main.cpp): tensors made without a device go
// to it. Tests of the CPU backend's own behaviour (its thread pool, host memory) skip on
// another device with EMBER_CPU_ONLY().
#pragma once

#include <gtest/gtest.h>

#include "ember.h"
#include "kernels/cuda/variants.h"

namespace ember::test {

inline Device test_device() { return default_device(); }
inline bool on_cuda() { return default_device().is_cuda(); }

// On cuda, cuDNN's deterministic algorithms for the scope (its others may sum with
// atomics in any order): for tests that compare two runs bit for bit.
class DeterministicConv {
 public:
  DeterministicConv() {
    if (!on_cuda()) return;
    saved_ = kernels::cuda::conv_deterministic();
    kernels::cuda::set_conv_deterministic(true);
  }
  ~DeterministicConv() {
    if (on_cuda()) kernels::cuda::set_conv_deterministic(saved_);
  }
  DeterministicConv(const DeterministicConv&) = delete;
  DeterministicConv& operator=(const DeterministicConv&) = delete;

 private:
  bool saved_ = false;
};

}  // namespace ember::test

#define EMBER_CPU_ONLY()                                                                              \
  do {                                                                                                \
    if (::ember::test::on_cuda()) GTEST_SKIP() << "tests the CPU backend itself (EMBER_TEST_DEVICE)"; \
  } while (0)
