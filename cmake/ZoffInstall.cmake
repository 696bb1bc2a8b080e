# Install rules: headers, the area libraries, the `zoff` CLI, a CMake package (zoffConfig.cmake
# with the imported target zoff::zoff) and a pkg-config file (zoff.pc).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ZOFF_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/zoff)
set_target_properties(zoff_torch PROPERTIES EXPORT_NAME torch)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/zoff DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(TARGETS ${ZOFF_ALL_AREAS} zoff_torch zoff_lib EXPORT zoffTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS zoff RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT zoffTargets NAMESPACE zoff:: DESTINATION ${ZOFF_CMAKE_DIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/zoffConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/package/zoffConfig.cmake
                              INSTALL_DESTINATION ${ZOFF_CMAKE_DIR}
                              PATH_VARS CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/zoffConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/zoffConfig.cmake
              ${PROJECT_BINARY_DIR}/package/zoffConfigVersion.cmake
        DESTINATION ${ZOFF_CMAKE_DIR})

# zoff.pc: the static area libraries in link order (dependents before what they use: areas
# are defined leaves first, so the reverse), then LibTorch, which has no .pc file of its own.
# The prefix is found from the .pc file's own place, so `cmake --install --prefix` works.
set(ZOFF_PC_LIBS "")
foreach(area ${ZOFF_COMPILED_AREAS})
  set(ZOFF_PC_LIBS "-lzoff_${area} ${ZOFF_PC_LIBS}")
endforeach()
get_filename_component(ZOFF_TORCH_LIBDIR "${TORCH_LIBRARY}" DIRECTORY)
set(ZOFF_PC_TORCH_CFLAGS "")
foreach(dir ${TORCH_INCLUDE_DIRS})
  if(NOT dir STREQUAL "/usr/include")  # a default search directory: -I would reorder it
    string(APPEND ZOFF_PC_TORCH_CFLAGS " -I${dir}")
  endif()
endforeach()
string(APPEND ZOFF_PC_TORCH_CFLAGS " ${TORCH_CXX_FLAGS}")
# LibTorch's CPU library and c10, as zoff_torch links them; the rpath finds them at run time
# (the wheel's torch/lib is no system directory).
set(ZOFF_PC_TORCH_LIBS
    "-L${ZOFF_TORCH_LIBDIR} -Wl,--no-as-needed -ltorch_cpu -Wl,--as-needed -lc10 -Wl,-rpath,${ZOFF_TORCH_LIBDIR}")
file(RELATIVE_PATH ZOFF_PC_PREFIX_FROM_PCFILEDIR "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
configure_file(${PROJECT_SOURCE_DIR}/cmake/zoff.pc.in ${PROJECT_BINARY_DIR}/package/zoff.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/zoff.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
