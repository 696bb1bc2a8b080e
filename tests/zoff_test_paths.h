// Paths the tests need. They are defined in one generated source per test binary
// (zoff_test_paths.cpp.in), not in this header, so that the objects of the test files do not
// depend on where the tree was cloned or built: a compiler cache filled by one checkout then
// serves another (CI's fresh clone) for every test file.
#pragma once

namespace zoff::test_paths {
const char* zoff_exe();    // the `zoff` binary of this build
const char* source_dir();  // the source tree's root
const char* binary_dir();  // the build tree's root
const char* python_exe();  // the interpreter with torch the build used (ZOFF_PYTHON_EXECUTABLE)
}  // namespace zoff::test_paths

#define ZOFF_EXE (::zoff::test_paths::zoff_exe())
#define ZOFF_SOURCE_DIR (::zoff::test_paths::source_dir())
#define ZOFF_BINARY_DIR (::zoff::test_paths::binary_dir())
#define ZOFF_PYTHON (::zoff::test_paths::python_exe())
