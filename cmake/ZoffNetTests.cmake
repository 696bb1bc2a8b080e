# The network-namespace tests (tests/net/): `zoff launch` on several "hosts" built from
# network namespaces, with links cut or degraded and hosts stopped or killed. They need root
# (ip netns); otherwise each file reports itself skipped with the reason (pytest -rs), which
# CTest shows as "Not Run". pytest comes from the venv the Python package is built with.
file(GLOB ZOFF_NET_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/tests/net/test_*.py)
foreach(t ${ZOFF_NET_TESTS})
  get_filename_component(name ${t} NAME_WE)
  add_test(NAME net.${name}
           COMMAND ${ZOFF_PYTHON_EXECUTABLE} -m pytest -q -s -rs -p no:cacheprovider ${t})
  # Both cores: the fault tests bound how soon every process exits.
  set_tests_properties(
    net.${name}
    PROPERTIES LABELS net TIMEOUT 900 PROCESSORS 2 SKIP_REGULAR_EXPRESSION "SKIPPED \\["
               ENVIRONMENT "ZOFF_EXE=$<TARGET_FILE:zoff>")
endforeach()
