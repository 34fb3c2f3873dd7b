// The op profiler: where a program's time goes, kernel by kernel.
//
//   start_op_profiler();
//   ... train ...
//   std::cout << format_op_profile(stop_op_profiler(), seconds_of_the_whole);
//
// Each backend kernel call (matmul, conv2d, adam_update, ...) is timed from the caller's
// side, so a kernel's figure includes its own threads' work. What the kernels leave of
// the whole is autograd, allocation and the rest of the framework (and the program's own
// work). The training examples print this table with --profile.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ember {

struct OpProfile {
  std::string op;
  int64_t calls = 0;
  double seconds = 0;
};

// Starts timing kernel calls, on every thread, from zero unless `resume` (then the
// figures of earlier runs are added to).
void start_op_profiler(bool resume = false);
// Stops timing; returns the figures so far, the largest total first.
std::vector<OpProfile> stop_op_profiler();
// A table: op, calls, seconds, share of `wall_seconds`, and what the kernels leave of it.
std::string format_op_profile(const std::vector<OpProfile>& profile, double wall_seconds);

}  // namespace ember
