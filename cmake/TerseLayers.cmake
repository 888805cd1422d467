# The layers of terse: each directory one static library, and target_link_libraries the only
# allowed arrows between them (docs/design.md, "Layers"). The list of layers is kept in the
# global property TERSE_LAYERS for the install rules (TerseInstall.cmake). Needs
# TerseWarnings.cmake (terse_set_warnings).

# terse_add_layer(<name> SOURCES ... DEPS ...): a library target terse_<name> with an alias
# terse::<name>, its headers in <dir>/include, and the listed layers as its only dependencies.
# A layer's headers are terse's own and are not installed: users get include/terse/ only
# (TerseInstall.cmake), which is self-contained.
function(terse_add_layer name)
  cmake_parse_arguments(L "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(terse_${name} STATIC ${L_SOURCES})
  add_library(terse::${name} ALIAS terse_${name})
  target_include_directories(terse_${name} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(terse_${name} PUBLIC ${L_DEPS} PRIVATE ${L_PRIVATE_DEPS})
  set_target_properties(terse_${name} PROPERTIES EXPORT_NAME ${name})
  terse_set_warnings(terse_${name})
  set_property(GLOBAL APPEND PROPERTY TERSE_LAYERS terse_${name})
endfunction()
