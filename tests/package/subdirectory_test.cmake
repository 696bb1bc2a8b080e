# Configures a project that pulls zoff in with add_subdirectory or with FetchContent (VIA)
# and links zoff::zoff: zoff's CMake must use its own source dir, not the top project's (it
# once failed with "No SOURCES given to target: zoff"). Configure only: building would take
# minutes (the installed-consumer test builds and runs against zoff).
if(VIA STREQUAL "FetchContent")
  # SOURCE_DIR: the checkout under test, as a user's FetchContent would get it from git.
  set(PULL_IN "include(FetchContent)
FetchContent_Declare(zoff SOURCE_DIR \"${ZOFF_SOURCE_DIR}\")
FetchContent_MakeAvailable(zoff)")
elseif(VIA STREQUAL "add_subdirectory")
  set(PULL_IN "add_subdirectory(\"${ZOFF_SOURCE_DIR}\" zoff)")
else()
  message(FATAL_ERROR "VIA = '${VIA}': must be add_subdirectory or FetchContent")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/host)
file(WRITE ${WORK_DIR}/host/CMakeLists.txt "
cmake_minimum_required(VERSION 3.22)
project(host LANGUAGES CXX)
${PULL_IN}
add_executable(host_app main.cpp)
target_link_libraries(host_app PRIVATE zoff::zoff)
if(NOT TARGET zoff OR TARGET zoff_test_cli)
  message(FATAL_ERROR \"expected the zoff CLI and no zoff tests in a host project\")
endif()
")
file(WRITE ${WORK_DIR}/host/main.cpp "#include <zoff/zoff.h>\nint main() { return 0; }\n")
execute_process(COMMAND ${CMAKE_COMMAND} -S ${WORK_DIR}/host -B ${WORK_DIR}/build -G ${GENERATOR}
                        -DTorch_DIR=${TORCH_DIR}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring a host project with ${VIA}(zoff) failed:\n${out}\n${err}")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
