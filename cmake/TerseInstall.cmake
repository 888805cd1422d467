# Installs every layer library, the public headers, an exported CMake package
# (find_package(terse) -> terse::terse and terse::<layer>) and a pkg-config file.
include(CMakePackageConfigHelpers)

get_property(terse_layers GLOBAL PROPERTY TERSE_LAYERS)

# One umbrella target for users: links every layer that was built.
add_library(terse_all INTERFACE)
add_library(terse::terse ALIAS terse_all)
target_link_libraries(terse_all INTERFACE ${terse_layers})
target_include_directories(terse_all INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
set_target_properties(terse_all PROPERTIES EXPORT_NAME terse)

install(TARGETS ${terse_layers} terse_all EXPORT terseTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT terseTargets NAMESPACE terse:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/terse)

# Layers append the find_dependency() lines their imported targets need.
get_property(TERSE_CONFIG_DEPENDENCIES GLOBAL PROPERTY TERSE_CONFIG_DEPENDENCIES)
string(REPLACE ";" "\n" TERSE_CONFIG_DEPENDENCIES "${TERSE_CONFIG_DEPENDENCIES}")
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/terseConfig.cmake.in
  ${PROJECT_BINARY_DIR}/terseConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/terse)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/terseConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/terseConfig.cmake ${PROJECT_BINARY_DIR}/terseConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/terse)

# pkg-config: static layers, listed leaves first so a single-pass linker resolves them.
set(TERSE_PC_LIBS "")
list(REVERSE terse_layers)
foreach(layer ${terse_layers})
  string(REPLACE "terse_" "" short ${layer})
  string(APPEND TERSE_PC_LIBS " -lterse_${short}")
endforeach()
get_property(terse_pc_extra GLOBAL PROPERTY TERSE_PC_EXTRA_LIBS)
foreach(extra ${terse_pc_extra})
  string(APPEND TERSE_PC_LIBS " ${extra}")
endforeach()
get_property(TERSE_PC_REQUIRES GLOBAL PROPERTY TERSE_PC_REQUIRES)
string(REPLACE ";" " " TERSE_PC_REQUIRES "${TERSE_PC_REQUIRES}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/terse.pc.in ${PROJECT_BINARY_DIR}/terse.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/terse.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
