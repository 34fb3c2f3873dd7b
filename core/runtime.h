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
void set_num_threads(int n);  // throws ember::Error unless n >= 1

// True when this build contains the CUDA backend (a GPU may still be absent).
bool cuda_backend_built();

// "cpu" or "cuda", whichever `--device auto` would pick in this process.
std::string default_device_name();

}  // namespace ember
