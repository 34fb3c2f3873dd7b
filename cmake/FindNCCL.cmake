# Finds NCCL: in NCCL_ROOT (variable or environment), then in the CUDA toolkit's folders.
# Defines NCCL_FOUND, NCCL_VERSION and the imported target NCCL::nccl.
set(_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
# The nvidia-nccl wheels ship libnccl.so.2 alone (no unversioned link): take it by name.
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib64 lib)

if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_defs REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  foreach(part MAJOR MINOR PATCH)
    string(REGEX MATCH "NCCL_${part} ([0-9]+)" _m "${_nccl_defs}")
    set(_nccl_${part} ${CMAKE_MATCH_1})
  endforeach()
  set(NCCL_VERSION "${_nccl_MAJOR}.${_nccl_MINOR}.${_nccl_PATCH}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR VERSION_VAR NCCL_VERSION)
if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
