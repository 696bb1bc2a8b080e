# Installs the built tree into a temporary prefix, builds tests/package/consumer against it with
# find_package(zoff) and runs it, builds pkgconfig_consumer.cpp with `pkg-config zoff` and runs
# it, and runs the installed `zoff --version`. Run by ctest (package.InstalledConsumerBuildsAndRuns)
# after a full build: cmake -DZOFF_BUILD_DIR=... -DZOFF_SOURCE_DIR=... -DWORK_DIR=... -P this.
function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${what}: ${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(STEP_OUTPUT "${out}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
run_step("install" ${CMAKE_COMMAND} --install ${ZOFF_BUILD_DIR} --prefix ${prefix})

# find_package(zoff) + zoff::zoff. -O0 (no build type): the test is about linking, not speed.
set(launcher "")
if(LAUNCHER)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()
run_step("configure consumer" ${CMAKE_COMMAND} -S ${ZOFF_SOURCE_DIR}/tests/package/consumer
         -B ${WORK_DIR}/consumer -G ${GENERATOR} -DCMAKE_PREFIX_PATH=${prefix} -DTorch_DIR=${TORCH_DIR}
         -DCMAKE_CXX_COMPILER=${CXX} ${launcher})
run_step("build consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
run_step("run consumer" ${WORK_DIR}/consumer/zoff_consumer)
if(NOT STEP_OUTPUT MATCHES "consumer: loss .* \\(zoff at ${prefix}/bin/zoff\\)")
  message(FATAL_ERROR "unexpected consumer output: ${STEP_OUTPUT}")
endif()

# pkg-config: the .pc file finds its prefix from its own place.
file(GLOB_RECURSE pc_files ${prefix}/zoff.pc)
list(GET pc_files 0 pc_file)
get_filename_component(pc_dir ${pc_file} DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pc_dir})
run_step("pkg-config" pkg-config --cflags --libs zoff)
string(STRIP "${STEP_OUTPUT}" pc_flags)
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
run_step("build pkg-config consumer" ${CXX} ${ZOFF_SOURCE_DIR}/tests/package/pkgconfig_consumer.cpp
         -o ${WORK_DIR}/pkgconfig_consumer ${pc_flags})
run_step("run pkg-config consumer" ${WORK_DIR}/pkgconfig_consumer)

run_step("installed zoff" ${prefix}/bin/zoff --version)
file(REMOVE_RECURSE ${WORK_DIR})
