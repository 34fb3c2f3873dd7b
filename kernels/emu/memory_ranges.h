// Address ranges of the emulator's memories, shared by the checks (check.cpp) and the
// profile counters (profile.cpp), which both sort each access of device code into
// shared memory, global memory or the emulator's own. Internal to kernels/emu.
#pragma once

#include <cstdint>
#include <vector>

namespace ember::emu::detail {

struct Range {
  uintptr_t lo = 0, hi = 0;
  bool holds(uintptr_t a) const { return a - lo < hi - lo; }
};

template <class T>
Range range_of(const T& v) {
  const auto lo = reinterpret_cast<uintptr_t>(&v);
  return Range{lo, lo + sizeof(T)};
}

// This OS thread's static thread-local blocks of the program and of the module holding
// ember's library (or the program itself, when linked statically): where `__shared__`
// variables are, since the emulator makes them thread-locals.
std::vector<Range> shared_tls_ranges();

}  // namespace ember::emu::detail
