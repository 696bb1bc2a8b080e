#!/usr/bin/env bash
# Configures and builds zoff into build/ (or $ZOFF_BUILD_DIR) with every core, against the
# LibTorch of the venv's torch wheel, through ccache when it is installed.
# --configure-only: configure and stop; other arguments go to `cmake --build`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
BUILD_DIR="${ZOFF_BUILD_DIR:-build}"

# ccache's settings (scripts/env.sh) ride in the launcher itself, so a plain `ninja` in the
# build tree compiles into the same cache with the same base directory: what the developer
# builds by hand is what CI's fresh clone then finds.
launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=)
if [[ -n "${CCACHE_DIR:-}" ]]; then
  cc=(/usr/bin/env "CCACHE_DIR=$CCACHE_DIR" "CCACHE_BASEDIR=$CCACHE_BASEDIR" CCACHE_NOHASHDIR=1
      CCACHE_COMPRESS=1 "CCACHE_MAXSIZE=$CCACHE_MAXSIZE" "CCACHE_SLOPPINESS=$CCACHE_SLOPPINESS" ccache)
  launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=$(IFS=';'; echo "${cc[*]}")")
fi

torch_prefix="$("$ZOFF_PY" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${ZOFF_BUILD_TYPE:-RelWithDebInfo}" \
  -DCMAKE_PREFIX_PATH="$torch_prefix" -DZOFF_PYTHON_EXECUTABLE="$ZOFF_PY" "${launcher[@]}" >/dev/null
[[ "${1:-}" == "--configure-only" ]] && exit 0
cmake --build "$BUILD_DIR" -j "$(nproc)" "$@"
