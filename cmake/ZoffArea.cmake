# zoff_area(): one static library per area (src/<area>) and, later, its test binary.
# Paths are PROJECT_SOURCE_DIR/PROJECT_BINARY_DIR (zoff's own), never CMAKE_SOURCE_DIR: zoff
# may be a subdirectory of another project (add_subdirectory, FetchContent).
set(ZOFF_ALL_AREAS "" CACHE INTERNAL "")
set(ZOFF_AREA_NAMES "" CACHE INTERNAL "")
# Areas with a static library (not header-only), in definition order (leaves first).
set(ZOFF_COMPILED_AREAS "" CACHE INTERNAL "")

# The shared precompiled header: built once by zoff_pch (a one-line library compiled with the
# flags every zoff target uses), reused by the others (zoff_use_shared_pch). Targets with
# other flags (the pybind11 module, benchmarks) parse the headers themselves.
function(zoff_shared_pch)
  if(NOT ZOFF_USE_PCH)
    return()
  endif()
  # file(CONFIGURE) rewrites it only when its text changes: no rebuild on every configure.
  file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/generated/zoff_pch.cpp
       CONTENT "// zoff_pch: carries the shared PCH\n")
  add_library(zoff_pch STATIC ${PROJECT_BINARY_DIR}/generated/zoff_pch.cpp)
  target_compile_options(zoff_pch PRIVATE ${ZOFF_WARNINGS})
  target_link_libraries(zoff_pch PRIVATE zoff_torch)
  target_precompile_headers(zoff_pch PRIVATE <torch/torch.h>)
endfunction()

function(zoff_use_shared_pch target)
  # zoff_optim compiles with -fopenmp, which defines _OPENMP: GCC refuses a header image
  # built without it. Most of its files are kernels that include no LibTorch header anyway.
  if(NOT ZOFF_USE_PCH OR target STREQUAL "zoff_optim")
    return()
  endif()
  target_precompile_headers(${target} REUSE_FROM zoff_pch)
  # GCC refuses an image built with other -fpic/-fpie settings. With position-independent
  # code on (the Python package links the areas into a shared module), the libraries and
  # the image are -fPIC and an executable would get -fPIE: it compiles with -fPIC instead,
  # which serves an executable as well.
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "EXECUTABLE" AND CMAKE_POSITION_INDEPENDENT_CODE)
    set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
    target_compile_options(${target} PRIVATE -fPIC)
  endif()
  # Highway kernels (hwy/foreach_target.h compiles the file once per SIMD target) include
  # no LibTorch header, and GCC 12 warns inside its AVX-512 intrinsics when LibTorch's
  # image comes first: they parse their own headers.
  get_target_property(srcs ${target} SOURCES)
  foreach(src ${srcs})
    zoff_is_highway_kernel(${src} highway)
    if(highway)
      set_source_files_properties(${src} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
    endif()
  endforeach()
endfunction()

function(zoff_area name)
  cmake_parse_arguments(A "" "" "DEPS" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${name}/*.cpp)
  # Installed consumers see <prefix>/include; the build tree sees the source tree's include/.
  set(includes $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:include>)
  if(srcs)
    zoff_batched_sources(${name} "${srcs}" srcs)
    add_library(zoff_${name} STATIC ${srcs})
    zoff_batch_include_root(zoff_${name})
    target_compile_options(zoff_${name} PRIVATE ${ZOFF_WARNINGS})
    zoff_use_shared_pch(zoff_${name})
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
# `zoff` binary or read shared test data find paths through tests/zoff_test_paths.h, defined
# in one generated source per binary so that no other test object depends on the checkout's
# path (a compiler cache filled by one checkout then serves a fresh clone elsewhere).
function(zoff_area_tests)
  set(paths_cpp ${PROJECT_BINARY_DIR}/generated/zoff_test_paths.cpp)
  configure_file(${PROJECT_SOURCE_DIR}/tests/zoff_test_paths.cpp.in ${paths_cpp})
  foreach(name ${ZOFF_AREA_NAMES} cli)
    file(GLOB tsrcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/${name}/*.cpp)
    if(tsrcs)
      zoff_batched_sources(test_${name} "${tsrcs}" tsrcs)
      add_executable(zoff_test_${name} ${tsrcs} ${paths_cpp}
                                       ${PROJECT_SOURCE_DIR}/tests/process_env.cpp)
      zoff_batch_include_root(zoff_test_${name})
      target_compile_options(zoff_test_${name} PRIVATE ${ZOFF_WARNINGS})
      target_include_directories(zoff_test_${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
      # An area's tests link that area (and what it depends on) only, so building one
      # area's tests does not build the others.
      if(name STREQUAL "cli")
        set(test_deps ${ZOFF_ALL_AREAS})
      elseif(name STREQUAL "estimate")
        # The planner's and the estimator's bytes are checked against the engine's own.
        set(test_deps zoff_estimate zoff_engine)
      else()
        set(test_deps zoff_${name})
      endif()
      target_link_libraries(zoff_test_${name} PRIVATE ${test_deps} GTest::gtest
                                                      GTest::gtest_main GTest::gmock)
      zoff_use_shared_pch(zoff_test_${name})
      if(name STREQUAL "cli" OR name STREQUAL "dist")
        add_dependencies(zoff_test_${name} zoff)  # these tests run the `zoff` binary
      endif()
      gtest_discover_tests(zoff_test_${name} DISCOVERY_TIMEOUT 120
                           PROPERTIES LABELS ${name} TIMEOUT 900)
      list(APPEND ZOFF_TEST_LIST_VARS zoff_test_${name}_TESTS)
    endif()
  endforeach()
  # After the discovered tests' include files: marks the cases that must run alone.
  set(resources ${PROJECT_BINARY_DIR}/generated/ZoffTestResources.cmake)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/ZoffTestResources.cmake.in ${resources} @ONLY)
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${resources})
endfunction()
