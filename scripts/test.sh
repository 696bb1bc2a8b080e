#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BUILD_DIR="${ZOFF_BUILD_DIR:-build}"
# Each test runs alone: multi-rank tests use both cores by themselves.
ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 900 "$@"
