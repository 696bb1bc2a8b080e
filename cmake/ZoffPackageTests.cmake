# ctest cases for zoff as a dependency (label "package"): a consumer project built against an
# installed tree in a temporary prefix, and zoff configured as a subdirectory of another project.
set(ZOFF_PACKAGE_TEST_DIR ${PROJECT_BINARY_DIR}/package_test)
add_test(NAME package.InstalledConsumerBuildsAndRuns
         COMMAND ${CMAKE_COMMAND} -DZOFF_BUILD_DIR=${PROJECT_BINARY_DIR}
                 -DZOFF_SOURCE_DIR=${PROJECT_SOURCE_DIR} -DWORK_DIR=${ZOFF_PACKAGE_TEST_DIR}/install
                 -DGENERATOR=${CMAKE_GENERATOR} -DLAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER}
                 -DTORCH_DIR=${Torch_DIR}
                 -DCXX=${CMAKE_CXX_COMPILER} -P ${PROJECT_SOURCE_DIR}/tests/package/consumer_test.cmake)
add_test(NAME package.AddSubdirectoryConfigures
         COMMAND ${CMAKE_COMMAND} -DZOFF_SOURCE_DIR=${PROJECT_SOURCE_DIR}
                 -DWORK_DIR=${ZOFF_PACKAGE_TEST_DIR}/subdir -DGENERATOR=${CMAKE_GENERATOR}
                 -DVIA=add_subdirectory -DTORCH_DIR=${Torch_DIR}
                 -P ${PROJECT_SOURCE_DIR}/tests/package/subdirectory_test.cmake)
add_test(NAME package.FetchContentConfigures
         COMMAND ${CMAKE_COMMAND} -DZOFF_SOURCE_DIR=${PROJECT_SOURCE_DIR}
                 -DWORK_DIR=${ZOFF_PACKAGE_TEST_DIR}/fetch -DGENERATOR=${CMAKE_GENERATOR}
                 -DVIA=FetchContent -DTORCH_DIR=${Torch_DIR}
                 -P ${PROJECT_SOURCE_DIR}/tests/package/subdirectory_test.cmake)
set_tests_properties(package.InstalledConsumerBuildsAndRuns package.AddSubdirectoryConfigures
                     package.FetchContentConfigures
                     PROPERTIES LABELS package TIMEOUT 600)
# The installed consumer's build compiles and links on every core.
set_tests_properties(package.InstalledConsumerBuildsAndRuns PROPERTIES PROCESSORS 2)
