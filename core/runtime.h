// Process-wide settings: backend initialisation, CPU threads, the default RNG seed.
#pragma once

#include <cstdint>
#include <string>

namespace ember {

// Registers the built backends' kernels. Called by the first tensor allocation; calling
// it again does nothing.
void init();

// Threads of the CPU backend's pool: EMBER_NUM_THREADS, else all cores.
int get_num_threads();
// Throws ember::Error unless 1 <= n <= 1024, or when the threads cannot start (the pool then
// keeps its size). EMBER_NUM_THREADS and the examples' --threads stop at the cores.
void set_num_threads(int n);

// For its lifetime, CPU kernels called on this thread run on this thread alone instead
// of the shared pool: for background threads (the DataLoader's prefetching) whose small
// kernels should not queue for the pool behind, or ahead of, the training step's.
class SingleThreadedScope {
 public:
  SingleThreadedScope();
  ~SingleThreadedScope();
  SingleThreadedScope(const SingleThreadedScope&) = delete;
  SingleThreadedScope& operator=(const SingleThreadedScope&) = delete;

 private:
  bool saved_;
};

// The vector instruction set the CPU code was compiled for, from the compiler's macros
// (-march, EMBER_CPU_ARCH): "avx512", "avx2" (with FMA) or "scalar". It names the paths
// the hand-vectorized CPU kernels (kernels/cpu/vec.h) took; the compiler's own
// vectorization follows the same flags.
const char* cpu_vector_isa();

// Whether float32 matmul, linear (cuBLAS) and conv2d (cuDNN) on a GPU may use TF32 tensor
// cores (10-bit mantissa products, float32 sums), as torch.backends.cuda.matmul.allow_tf32
// and torch.backends.cudnn.allow_tf32 together: off by default, so float32 results keep
// float32 precision. Process-wide; the CPU and the emulated device ignore it.
void set_allow_tf32(bool allow);
bool allow_tf32();

// True when this build contains the CUDA backend (a GPU may still be absent).
bool cuda_backend_built();

// "cpu" or "cuda", whichever `--device auto` would pick in this process.
std::string default_device_name();

}  // namespace ember
