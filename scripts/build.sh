#!/usr/bin/env bash
# Configures and builds zoff into build/ (or $ZOFF_BUILD_DIR) with every core.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${ZOFF_BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${ZOFF_BUILD_TYPE:-RelWithDebInfo}" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" "$@"
