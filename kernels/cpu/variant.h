// How the backends' kernel variants (GEMM, conv2d, attention, RNN, SpMM) take their
// starting choice from the environment (EMBER_GEMM, EMBER_CONV, ...).
#pragma once

#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"

namespace ember::kernels::cpu {

namespace detail {
struct EnvVariable {
  const char* name;
  std::function<void(std::string_view)> parse;  // throws ember::Error on a bad value
};
// Every variable read by variant_from_env, in the order the library's globals were built.
inline std::vector<EnvVariable>& env_variables() {
  static std::vector<EnvVariable> vars;
  return vars;
}
}  // namespace detail

// The variant named by environment variable `var`, or `fallback` when it is unset or
// empty. Read once, at load time, where an exception cannot be caught: a bad value gives
// `fallback` here and is refused by check_variant_environment(), which ember::init()
// runs before any kernel (register_cpu_kernels), as an ember::Error naming the variable.
template <class V>
V variant_from_env(const char* var, V fallback, V (*parse)(std::string_view)) {
  detail::env_variables().push_back({var, [parse](std::string_view s) { parse(s); }});
  const char* env = std::getenv(var);
  if (!env || !*env) return fallback;
  try {
    return parse(env);
  } catch (const Error&) {
    return fallback;
  }
}

// Throws an ember::Error naming the first variable of variant_from_env whose value no
// backend that reads it takes (EMBER_CONV and EMBER_GEMM name a CPU and a CUDA variant:
// "winograd" is the CPU's, "cudnn" CUDA's).
inline void check_variant_environment() {
  const std::vector<detail::EnvVariable>& vars = detail::env_variables();
  for (size_t i = 0; i < vars.size(); ++i) {
    const char* env = std::getenv(vars[i].name);
    if (!env || !*env) continue;
    bool first = true, taken = false;
    std::string why;
    for (size_t j = 0; j < vars.size(); ++j) {
      if (std::string_view(vars[j].name) != vars[i].name) continue;
      if (j < i) first = false;
      try {
        vars[j].parse(env);
        taken = true;
      } catch (const Error& e) {
        why += (why.empty() ? "" : "; ") + std::string(e.what());
      }
    }
    if (first && !taken) EMBER_FAIL(vars[i].name, "=", std::string(env), ": ", why);
  }
}

}  // namespace ember::kernels::cpu
