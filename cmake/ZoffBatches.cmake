# zoff_batched_sources(): compiles a target's .cpp files a few at a time, one generated
# translation unit per batch that #includes them.
#
# Why: a zoff source file alone costs ~17-26 s to compile here, most of it what every file
# pays again (loading LibTorch's ~740 MB header image, instantiating LibTorch's and
# GoogleTest's inline code at -O2); in a batch each further file costs ~5 s (measured
# 2026-11-27, 2 cores: four cli test files 106 s one by one, 30 s together; the 111 test files
# took ~2,900 s of compile alone and 667 s in 23 batches). A cold build is mostly this.
#
# CMake's UNITY_BUILD does the same but includes the files by absolute path, which a compiler
# cache cannot share between two clones; these batches include them by their path under the
# source root (an include directory of the target, which ccache's base_dir makes relative), so
# CI's fresh clone still hits what the developer's checkout compiled.
#
# Files are written for it: what a file keeps to itself (anonymous namespace, static) has a
# name no other file of its target uses (test files put theirs in a namespace named for the
# file), and no file leaves a macro or a using-directive behind at namespace scope.
# Highway kernels (hwy/foreach_target.h re-includes the file once per SIMD target) are
# compiled alone. ZOFF_BATCH_SIZE=1 compiles every file alone (quicker rebuilds while editing
# one file; slower cold builds).
# Sets OUT_VAR to TRUE when SRC is a Highway kernel (includes hwy/foreach_target.h).
function(zoff_is_highway_kernel src out_var)
  file(STRINGS ${src} uses_highway_targets REGEX "#include <hwy/foreach_target.h>")
  if(uses_highway_targets)
    set(${out_var} TRUE PARENT_SCOPE)
  else()
    set(${out_var} FALSE PARENT_SCOPE)
  endif()
endfunction()

set(ZOFF_BATCH_SIZE 8 CACHE STRING "Source files compiled together in one translation unit (1: each alone)")

# Sets OUT_VAR to SOURCES with all but the Highway kernels replaced by batches named
# generated/batches/LABEL_<n>.cpp; the target then needs zoff_batch_include_root().
function(zoff_batched_sources label sources out_var)
  if(NOT ZOFF_BATCH_SIZE MATCHES "^[1-9][0-9]*$")
    message(FATAL_ERROR "ZOFF_BATCH_SIZE='${ZOFF_BATCH_SIZE}' is not a count >= 1")
  endif()
  list(SORT sources)
  set(result "")
  set(batched "")
  foreach(src IN LISTS sources)
    zoff_is_highway_kernel(${src} highway)
    if(highway OR ZOFF_BATCH_SIZE EQUAL 1)
      list(APPEND result ${src})
    else()
      list(APPEND batched ${src})
    endif()
  endforeach()
  set(index 0)
  set(text "")
  set(in_batch 0)
  foreach(src IN LISTS batched)
    file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${src})
    string(APPEND text "#include \"${rel}\"\n")
    math(EXPR in_batch "${in_batch} + 1")
    if(in_batch EQUAL ZOFF_BATCH_SIZE)
      zoff_write_batch(${label} ${index} "${text}" result)
      math(EXPR index "${index} + 1")
      set(text "")
      set(in_batch 0)
    endif()
  endforeach()
  if(in_batch GREATER 0)
    zoff_write_batch(${label} ${index} "${text}" result)
  endif()
  set(${out_var} ${result} PARENT_SCOPE)
endfunction()

# Writes batch INDEX of LABEL (rewritten only when its list of files changes: no rebuild on
# every configure) and appends its path to the list named by LIST_VAR.
function(zoff_write_batch label index includes list_var)
  set(path ${PROJECT_BINARY_DIR}/generated/batches/${label}_${index}.cpp)
  file(CONFIGURE OUTPUT ${path}
       CONTENT "// Generated (cmake/ZoffBatches.cmake): ${label}, batch ${index}.\n${includes}")
  set(${list_var} ${${list_var}} ${path} PARENT_SCOPE)
endfunction()

# The batches of TARGET include its files by their path under the source root.
function(zoff_batch_include_root target)
  target_include_directories(${target} PRIVATE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
endfunction()
