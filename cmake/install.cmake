# The installable CMake package: find_package(flashattn) gives flashattn::flashattn
# (shared) and flashattn::flashattn_static.
include(CMakePackageConfigHelpers)

install(TARGETS flashattn flashattn_static EXPORT flashattnTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/flashattn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT flashattnTargets NAMESPACE flashattn::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashattn)

set(FLASHATTN_PACKAGE_NEEDS_CUDA ${FLASHATTN_WITH_CUDA})
configure_package_config_file(cmake/flashattnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/flashattnConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashattn)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/flashattnConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/flashattnConfig.cmake
  ${PROJECT_BINARY_DIR}/flashattnConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashattn)
