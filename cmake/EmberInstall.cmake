# `cmake --install` lays out ember so that find_package(ember) works:
# headers under include/ember (same paths as in the repository), the library, and a
# package config that recreates the ember::ember target.
#
# Note [Installed include paths]. In the repository, headers include each other from the
# root ("core/tensor.h"). Installed, they say "ember/core/tensor.h": the install rewrites
# its copies' includes of ember's own headers, so a user compiles with -I<prefix>/include
# alone and writes #include <ember/ember.h> (the layout of <torch/torch.h> or <Eigen/Dense>).
# Why not put include/ember on the user's path instead: ember's folder names (core/,
# data/, layers/) would then shadow, or be shadowed by, a user's own folders of the same
# names. Why not rename the repository's includes: the sources keep one spelling, and the
# rewrite is contained in this file.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS ember EXPORT emberTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ember-run RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})  # the launcher
# ember-run links the library (comm/launch.h): the installed one finds it beside its bin/.
set_target_properties(ember-run PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
set(EMBER_HEADER_DIRS base core memory kernels layers optim data comm)
install(FILES ember.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ember)
foreach(dir ${EMBER_HEADER_DIRS})
  install(DIRECTORY ${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ember/${dir}
          FILES_MATCHING PATTERN "*.h")
endforeach()
# Runs after the copies above (install rules run in order): Note [Installed include paths].
install(CODE "set(EMBER_INCLUDE_ROOT \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_INCLUDEDIR}/ember\")
  set(EMBER_HEADER_DIRS \"${EMBER_HEADER_DIRS}\")")
install(SCRIPT cmake/EmberRewriteIncludes.cmake)

install(EXPORT emberTargets NAMESPACE ember:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ember)
configure_package_config_file(cmake/emberConfig.cmake.in
  ${PROJECT_BINARY_DIR}/emberConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ember)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/emberConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/emberConfig.cmake ${PROJECT_BINARY_DIR}/emberConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ember)
