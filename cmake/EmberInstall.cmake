# `cmake --install` lays out ember so that find_package(ember) works:
# headers under include/ember (same paths as in the repository), the library, and a
# package config that recreates the ember::ember target.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS ember EXPORT emberTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ember-run RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})  # the launcher
# ember-run links the library (comm/launch.h): the installed one finds it beside its bin/.
set_target_properties(ember-run PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
install(FILES ember.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ember)
foreach(dir base core memory kernels layers optim data comm)
  install(DIRECTORY ${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ember/${dir}
          FILES_MATCHING PATTERN "*.h")
endforeach()

install(EXPORT emberTargets NAMESPACE ember:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ember)
configure_package_config_file(cmake/emberConfig.cmake.in
  ${PROJECT_BINARY_DIR}/emberConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ember)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/emberConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/emberConfig.cmake ${PROJECT_BINARY_DIR}/emberConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ember)
