// Portability macros shared by host code, CUDA kernels and the CUDA emulator.
#pragma once

// A function usable from both the CPU backend and CUDA kernels (kernels/common/).
#if defined(__CUDACC__)
#define EMBER_HD __host__ __device__
#else
#define EMBER_HD
#endif

#define EMBER_STRINGIFY_IMPL(x) #x
#define EMBER_STRINGIFY(x) EMBER_STRINGIFY_IMPL(x)
