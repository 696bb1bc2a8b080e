# zoff_area(): one static library per area (src/<area>) and, later, its test binary.
# Paths are PROJECT_SOURCE_DIR/PROJECT_BINARY_DIR (zoff's own), never CMAKE_SOURCE_DIR: zoff
# may be a subdirectory of another project (add_subdirectory, FetchContent).
set(ZOFF_ALL_AREAS "" CACHE INTERNAL "")
set(ZOFF_AREA_NAMES "" CACHE INTERNAL "")
# Areas with a static library (not header-only), in definition order (leaves first).
set(ZOFF_COMPILED_AREAS "" CACHE INTERNAL "")

function(zoff_area name)
  cmake_parse_arguments(A "" "" "DEPS" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${name}/*.cpp)
  # Installed consumers see <prefix>/include; the build tree sees the source tree's include/.
  set(includes $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:include>)
  if(srcs)
    add_library(zoff_${name} STATIC ${srcs})
    target_compile_options(zoff_${name} PRIVATE ${ZOFF_WARNINGS})
    if(ZOFF_USE_PCH)
      target_precompile_headers(zoff_${name} PRIVATE <torch/torch.h>)
    endif()
    target_include_directories(zoff_${name} PUBLIC ${includes})
    target_link_libraries(zoff_${name} PUBLIC ${A_DEPS})
    set(ZOFF_COMPILED_AREAS ${ZOFF_COMPILED_AREAS} ${name} CACHE INTERNAL "")
  else()
    add_library(zoff_${name} INTERFACE)
    target_include_directories(zoff_${name} INTERFACE ${includes})
    target_link_libraries(zoff_${name} INTERFACE ${A_DEPS})
  endif()
  # Exported (and aliased in the build tree) as zoff::<area>.
  set_target_properties(zoff_${name} PROPERTIES EXPORT_NAME ${name})
  add_library(zoff::${name} ALIAS zoff_${name})
  set(ZOFF_ALL_AREAS ${ZOFF_ALL_AREAS} zoff_${name} CACHE INTERNAL "")
  set(ZOFF_AREA_NAMES ${ZOFF_AREA_NAMES} ${name} CACHE INTERNAL "")
endfunction()

# Tests of area X live in tests/X/*.cpp and build into zoff_test_X. Tests that run the
# `zoff` binary or read shared test data find paths in the generated zoff_test_paths.h.
function(zoff_area_tests)
  configure_file(${PROJECT_SOURCE_DIR}/tests/zoff_test_paths.h.in
                 ${PROJECT_BINARY_DIR}/generated/zoff_test_paths.h)
  foreach(name ${ZOFF_AREA_NAMES} cli)
    file(GLOB tsrcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/${name}/*.cpp)
    if(tsrcs)
      add_executable(zoff_test_${name} ${tsrcs})
      target_compile_options(zoff_test_${name} PRIVATE ${ZOFF_WARNINGS})
      target_include_directories(zoff_test_${name} PRIVATE ${PROJECT_BINARY_DIR}/generated
                                                           ${PROJECT_SOURCE_DIR}/tests)
      # An area's tests link that area (and what it depends on) only, so building one
      # area's tests does not build the others.
      if(name STREQUAL "cli")
        set(test_deps ${ZOFF_ALL_AREAS})
      else()
        set(test_deps zoff_${name})
      endif()
      target_link_libraries(zoff_test_${name} PRIVATE ${test_deps} GTest::gtest
                                                      GTest::gtest_main GTest::gmock)
      if(ZOFF_USE_PCH)
        target_precompile_headers(zoff_test_${name} PRIVATE <torch/torch.h> <gtest/gtest.h>)
      endif()
      if(name STREQUAL "cli" OR name STREQUAL "dist")
        add_dependencies(zoff_test_${name} zoff)  # these tests run the `zoff` binary
      endif()
      gtest_discover_tests(zoff_test_${name} DISCOVERY_TIMEOUT 120
                           PROPERTIES LABELS ${name} TIMEOUT 900)
    endif()
  endforeach()
endfunction()
