# Install-time step of cmake/EmberInstall.cmake (Note [Installed include paths]): in the
# installed headers under EMBER_INCLUDE_ROOT, `#include "core/x.h"` (any folder of
# EMBER_HEADER_DIRS) becomes `#include "ember/core/x.h"`. Idempotent: a rewritten include
# starts with "ember/" and does not match again.
string(REPLACE ";" "|" dirs "${EMBER_HEADER_DIRS}")
file(GLOB_RECURSE headers "${EMBER_INCLUDE_ROOT}/*.h")
foreach(h ${headers})
  file(READ "${h}" text)
  string(REGEX REPLACE "#include \"((${dirs})/[^\"]+)\"" "#include \"ember/\\1\"" rewritten "${text}")
  if(NOT rewritten STREQUAL text)
    file(WRITE "${h}" "${rewritten}")
  endif()
endforeach()
