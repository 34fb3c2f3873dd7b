// The device a test runs on (tests/device_main.cpp): tensors made without a device go
// to it. Tests of the CPU backend's own behaviour (its thread pool, host memory) skip on
// another device with EMBER_CPU_ONLY().
#pragma once

#include <gtest/gtest.h>

#include "ember.h"

namespace ember::test {

inline Device test_device() { return default_device(); }
inline bool on_cuda() { return default_device().is_cuda(); }

}  // namespace ember::test

#define EMBER_CPU_ONLY()                                                                              \
  do {                                                                                                \
    if (::ember::test::on_cuda()) GTEST_SKIP() << "tests the CPU backend itself (EMBER_TEST_DEVICE)"; \
  } while (0)
