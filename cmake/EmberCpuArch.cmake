# Says which vector paths the host code is compiled with: the hand-vectorized CPU kernels
# choose theirs by the compiler's macros (__AVX512F__, __AVX2__), so -march decides them.
# Sets EMBER_CPU_VECTOR_ISA to avx512, avx2 or scalar.
set(_flags)
if(NOT EMBER_CPU_ARCH STREQUAL "OFF")
  set(_flags -march=${EMBER_CPU_ARCH})
endif()
execute_process(
  COMMAND ${CMAKE_CXX_COMPILER} ${_flags} -dM -E -x c++ /dev/null
  OUTPUT_VARIABLE _macros RESULT_VARIABLE _rc ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "EMBER_CPU_ARCH=${EMBER_CPU_ARCH}: the compiler rejects ${_flags}: ${_err}")
endif()
if(_macros MATCHES "#define __AVX512F__ ")
  set(EMBER_CPU_VECTOR_ISA avx512)
elseif(_macros MATCHES "#define __AVX2__ ")
  set(EMBER_CPU_VECTOR_ISA avx2)
else()
  set(EMBER_CPU_VECTOR_ISA scalar)
endif()
message(STATUS "ember: host code for -march=${EMBER_CPU_ARCH}: ${EMBER_CPU_VECTOR_ISA} vector paths")
unset(_flags)
unset(_macros)
