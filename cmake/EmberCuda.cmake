# Decides whether the CUDA backend is built (EMBER_CUDA=AUTO|ON|OFF|EMULATED) and finds
# its libraries. Sets EMBER_WITH_CUDA (the backend for real GPUs, compiled by nvcc), and
# EMBER_WITH_CUDNN / EMBER_WITH_NCCL; or EMBER_CUDA_EMULATED (the same backend sources
# compiled by the host compiler against kernels/emu, presenting emulated devices).
set(EMBER_WITH_CUDA OFF)
set(EMBER_CUDA_EMULATED OFF)
set(EMBER_WITH_CUDNN OFF)
set(EMBER_WITH_NCCL OFF)

if(NOT EMBER_CUDA MATCHES "^(AUTO|ON|OFF|EMULATED)$")
  message(FATAL_ERROR "EMBER_CUDA must be AUTO, ON, OFF or EMULATED, not '${EMBER_CUDA}'")
endif()

if(EMBER_CUDA STREQUAL "EMULATED")
  set(EMBER_CUDA_EMULATED ON)  # kernels/CMakeLists.txt checks that the emulator can be built
elseif(NOT EMBER_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # `native` fails where there is no GPU, so it is never the default.
    if(NOT CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90 CACHE STRING "CUDA architectures" FORCE)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(EMBER_WITH_CUDA ON)
  elseif(EMBER_CUDA STREQUAL "ON")
    message(FATAL_ERROR "EMBER_CUDA=ON but no CUDA compiler was found (set CUDACXX or put nvcc on PATH)")
  endif()
endif()

if(EMBER_WITH_CUDA)
  # CMake 3.25 does not know nvcc 13's C++20 flag; teach it (newer CMakes know it).
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(EMBER_CUDA_FLAGS --expt-relaxed-constexpr)
  find_package(CUDNN)
  find_package(NCCL)
  set(EMBER_WITH_CUDNN ${CUDNN_FOUND})
  set(EMBER_WITH_NCCL ${NCCL_FOUND})
endif()
if(EMBER_CUDA_EMULATED)
  message(STATUS "ember: CUDA backend EMULATED (host code against kernels/emu; no GPU code, no cuBLAS/cuDNN/NCCL)")
else()
  message(STATUS "ember: CUDA backend ${EMBER_WITH_CUDA} (cuDNN ${EMBER_WITH_CUDNN}, NCCL ${EMBER_WITH_NCCL})")
endif()

# Device code's loads and stores reach the CUDA emulator's checks (racecheck, initcheck,
# synccheck; kernels/emu/check.cpp, EMBER_EMU_CHECK): the compiler's ThreadSanitizer
# instrumentation at compile time only, with ember's own definitions of the __tsan_* entry
# points instead of libtsan (never linked), as the Linux kernel's KCSAN does. Applied to
# the translation units that hold kernels (the emulated backend's .cu files and the kernel
# tests), with line tables (-g1) so a report names source lines. Not with another
# sanitizer: ThreadSanitizer's instrumentation excludes AddressSanitizer's.
option(EMBER_EMU_INSTRUMENT "Instrument emulated kernels' memory accesses for the emulator's checks" ON)
set(EMBER_EMU_INSTRUMENT_FLAGS "")
if(EMBER_EMU_INSTRUMENT AND NOT EMBER_SANITIZE)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    set(EMBER_EMU_INSTRUMENT_FLAGS -fsanitize=thread --param=tsan-instrument-func-entry-exit=0 -g1)
  elseif(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    set(EMBER_EMU_INSTRUMENT_FLAGS -fsanitize=thread -mllvm -tsan-instrument-func-entry-exit=0
      -mllvm -tsan-instrument-read-before-write -gline-tables-only)
  endif()
endif()
