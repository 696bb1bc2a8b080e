# Finds the Python interpreter the zoff package is for: one whose torch is the LibTorch this
# build links (same torch/lib), so that the engine and Python share one TensorImpl per
# tensor. scripts/build.sh passes the venv's interpreter; -DZOFF_PYTHON_EXECUTABLE overrides.
set(ZOFF_PYTHON_EXECUTABLE python3 CACHE FILEPATH "Python interpreter with torch")
set(ZOFF_PYTHON_TORCH_FOUND OFF)
execute_process(
  COMMAND ${ZOFF_PYTHON_EXECUTABLE} -c
          "import os, torch; print(torch.__version__ + ';' + os.path.dirname(torch.__file__))"
  RESULT_VARIABLE zoff_py_rc
  OUTPUT_VARIABLE zoff_py_torch
  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(zoff_py_rc EQUAL 0)
  list(GET zoff_py_torch 0 zoff_py_torch_version)
  list(GET zoff_py_torch 1 zoff_py_torch_dir)
  get_filename_component(zoff_py_torch_dir "${zoff_py_torch_dir}" REALPATH)
  get_filename_component(zoff_linked_torch_dir "${TORCH_INSTALL_PREFIX}" REALPATH)
  if(zoff_py_torch_dir STREQUAL zoff_linked_torch_dir)
    set(ZOFF_PYTHON_TORCH_FOUND ON)
    message(STATUS "zoff python: ${ZOFF_PYTHON_EXECUTABLE} has torch ${zoff_py_torch_version}")
  else()
    message(STATUS "zoff python: ${ZOFF_PYTHON_EXECUTABLE}'s torch (${zoff_py_torch_dir}) is not "
                   "the LibTorch linked (${zoff_linked_torch_dir})")
  endif()
endif()
if(NOT ZOFF_PYTHON_TORCH_FOUND)
  message(STATUS "zoff python: ${ZOFF_PYTHON_EXECUTABLE} cannot import torch; package off")
endif()
