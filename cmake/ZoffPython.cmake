# Finds the Python interpreter the zoff package is for: one that imports Debian's torch.
# PATH may put another python3 first (pyenv, a venv) that has no torch and another
# libpython, so the default is Debian's /usr/bin/python3; -DZOFF_PYTHON_EXECUTABLE overrides.
set(ZOFF_PYTHON_EXECUTABLE /usr/bin/python3 CACHE FILEPATH "Python interpreter with torch")
set(ZOFF_PYTHON_TORCH_FOUND OFF)
if(EXISTS ${ZOFF_PYTHON_EXECUTABLE})
  execute_process(
    COMMAND ${ZOFF_PYTHON_EXECUTABLE} -c "import torch; print(torch.__version__)"
    RESULT_VARIABLE zoff_py_rc
    OUTPUT_VARIABLE zoff_py_torch_version
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(zoff_py_rc EQUAL 0)
    set(ZOFF_PYTHON_TORCH_FOUND ON)
    message(STATUS "zoff python: ${ZOFF_PYTHON_EXECUTABLE} has torch ${zoff_py_torch_version}")
  endif()
endif()
if(NOT ZOFF_PYTHON_TORCH_FOUND)
  message(STATUS "zoff python: ${ZOFF_PYTHON_EXECUTABLE} cannot import torch; package off")
endif()
