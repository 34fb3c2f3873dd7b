# Finds cuDNN: in CUDNN_ROOT (variable or environment), then in the CUDA toolkit's folders.
# Defines CUDNN_FOUND, CUDNN_VERSION and the imported target CUDNN::cudnn.
set(_cudnn_hints ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
find_path(CUDNN_INCLUDE_DIR cudnn_version.h HINTS ${_cudnn_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
# The nvidia-cudnn wheels ship libcudnn.so.9 alone (no unversioned link): take it by name.
find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 NAMES_PER_DIR HINTS ${_cudnn_hints} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib64 lib)

if(CUDNN_INCLUDE_DIR AND EXISTS "${CUDNN_INCLUDE_DIR}/cudnn_version.h")
  file(STRINGS "${CUDNN_INCLUDE_DIR}/cudnn_version.h" _cudnn_defs REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
  foreach(part MAJOR MINOR PATCHLEVEL)
    string(REGEX MATCH "CUDNN_${part} ([0-9]+)" _m "${_cudnn_defs}")
    set(_cudnn_${part} ${CMAKE_MATCH_1})
  endforeach()
  set(CUDNN_VERSION "${_cudnn_MAJOR}.${_cudnn_MINOR}.${_cudnn_PATCHLEVEL}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR VERSION_VAR CUDNN_VERSION)
if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  add_library(CUDNN::cudnn UNKNOWN IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES IMPORTED_LOCATION "${CUDNN_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
endif()
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)
