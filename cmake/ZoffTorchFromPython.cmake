# Under `pip install .` (scikit-build-core sets SKBUILD): LibTorch is the one inside the torch
# of the environment being installed into, found through its interpreter (Python_EXECUTABLE,
# which scikit-build-core sets to that environment's). pip's build isolation puts a
# PYTHONPATH whose sitecustomize hides that environment's site-packages, so the query runs
# without it: the interpreter then sees its own packages, and no other torch is downloaded.
if(NOT SKBUILD)
  return()
endif()
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env --unset=PYTHONPATH --unset=PYTHONNOUSERSITE ${Python_EXECUTABLE}
          -c "import torch, torch.utils; print(torch.utils.cmake_prefix_path)"
  RESULT_VARIABLE zoff_rc
  OUTPUT_VARIABLE zoff_torch_prefix
  ERROR_VARIABLE zoff_err
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT zoff_rc EQUAL 0)
  message(FATAL_ERROR "zoff: ${Python_EXECUTABLE} cannot import torch (install torch >= 2.11 "
                      "into the environment first; with a build frontend that isolates the "
                      "build in a new environment, use pip install --no-build-isolation):\n${zoff_err}")
endif()
list(APPEND CMAKE_PREFIX_PATH ${zoff_torch_prefix})
set(ZOFF_PYTHON_EXECUTABLE ${Python_EXECUTABLE} CACHE FILEPATH "Python interpreter with torch")
# ZoffPython.cmake's own torch check runs the same interpreter: it must see the same packages.
set(ENV{PYTHONPATH} "")
