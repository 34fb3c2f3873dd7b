// How the CPU backend's kernel variants (GEMM, conv2d) take their starting choice from
// the environment.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "base/error.h"

namespace ember::kernels::cpu {

// The variant named by environment variable `var`, or `fallback` when it is unset. Read
// once at load time, where an exception cannot be caught: a bad value is reported on
// stderr and ignored.
template <class V>
V variant_from_env(const char* var, V fallback, V (*parse)(std::string_view)) {
  const char* env = std::getenv(var);
  if (!env) return fallback;
  try {
    return parse(env);
  } catch (const Error& e) {
    std::fprintf(stderr, "ember: ignoring %s: %s\n", var, e.what());
    return fallback;
  }
}

}  // namespace ember::kernels::cpu
