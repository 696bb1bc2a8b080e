#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test suite on every
# core (ctest -j; tests that must not share the cores say so: cmake/ZoffTestResources.cmake).
# Prints the time of each phase, ccache's hit rate and the 20 slowest tests at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
BUILD_DIR="${ZOFF_BUILD_DIR:-build}"
PHASES=()

# phase NAME COMMAND...: runs the command and records how long it took.
phase() {
  local name=$1 start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  PHASES+=("$(printf '%-10s %5d s' "$name" $((SECONDS - start)))")
  return $rc
}

summary() {
  echo
  echo "== phases"
  printf '   %s\n' "${PHASES[@]}"
  if [[ -n "${CCACHE_DIR:-}" ]]; then
    echo "== ccache ($CCACHE_DIR): $(ccache --print-stats | awk -F'\t' '
      $1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { hit += $2 }
      $1 == "cache_miss" { miss += $2 }
      END { n = hit + miss; printf "%d hits, %d misses, %.1f%% hit rate", hit, miss, n ? 100 * hit / n : 0 }')"
  fi
  if [[ -f "$BUILD_DIR/ctest-results.xml" ]]; then
    "$ZOFF_PY" scripts/slowest_tests.py "$BUILD_DIR/ctest-results.xml" 20
  fi
}

trap summary EXIT
phase setup bash scripts/setup.sh
source scripts/env.sh  # again: on a bare machine ccache exists only after setup
if [[ -n "${CCACHE_DIR:-}" ]]; then ccache --zero-stats >/dev/null; fi
phase configure bash scripts/build.sh --configure-only
phase build bash scripts/build.sh
rm -f "$BUILD_DIR/ctest-results.xml"
phase tests ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 900 -j "$(nproc)" \
  --output-junit ctest-results.xml "$@"
