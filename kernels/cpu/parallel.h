// The CPU backend's thread pool and its one entry point, parallel_for.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace ember::kernels::cpu {

// Elements of simple elementwise work below which splitting across threads costs more
// than it saves (waking a worker takes a few microseconds); PyTorch uses the same figure.
inline constexpr int64_t kGrainSize = 32768;

// Calls fn(begin, end) on disjoint chunks covering [begin, end), each at least `grain`
// long except the last, on up to num_threads() threads (the caller is one of them).
// Runs inline when the range is small, the pool has one thread, or when called from
// inside another parallel_for. Waits for all chunks; rethrows the first exception.
void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

int num_threads();
// EMBER_NUM_THREADS's value as a thread count: a whole number from 1 to the cores of this
// machine (more threads than cores only wait for each other: 1000 on 2 cores ran 300x
// slower), else an ember::Error naming the range ("0", "-3", "4x", "" or "99999" would
// otherwise leave a silently wrong pool, or one whose threads cannot start).
int parse_num_threads(const std::string& text);
// Threads a program may ask for (set_num_threads): more than the cores is allowed there,
// as tests of thread-count independence need, but not beyond this.
inline constexpr int kMaxThreads = 1024;
// Resizes the pool; a thread that cannot start is an ember::Error, and the pool keeps its size.
void set_num_threads(int n);

// While set, parallel_for on the calling thread runs inline: for background threads (the
// data loader's) whose small kernels would otherwise queue for the pool behind, or
// ahead of, the training step's.
bool thread_serial();
void set_thread_serial(bool on);

}  // namespace ember::kernels::cpu
