# Sourced by the other scripts: where zoff's PyTorch venv and compiler cache live.
# Both sit outside the clone, at fixed paths, so every checkout on this machine (the
# developer's, CI's fresh clone) shares one 5.4 GB venv and one compiler cache.
#   ZOFF_VENV        the virtual environment with the pinned torch (python/requirements.txt)
#   ZOFF_CCACHE_DIR  ccache's cache (CCACHE_DIR for zoff's builds)
#   ZOFF_BASE_PYTHON the interpreter that creates the venv (the image's python3.11)
ZOFF_CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/zoff"
ZOFF_TORCH_PIN="$(sed -n 's/^torch==\([^ ]*\).*/\1/p' "$(dirname "${BASH_SOURCE[0]}")/../python/requirements.txt")"
export ZOFF_VENV="${ZOFF_VENV:-$ZOFF_CACHE_ROOT/venv-torch-$ZOFF_TORCH_PIN}"
export ZOFF_CCACHE_DIR="${ZOFF_CCACHE_DIR:-$ZOFF_CACHE_ROOT/ccache}"
ZOFF_BASE_PYTHON="${ZOFF_BASE_PYTHON:-python3.11}"
ZOFF_PY="$ZOFF_VENV/bin/python"

# ccache (ZOFF_CCACHE=0 turns it off), set up so that a fresh clone in another folder hits
# what this one compiled: paths under the clone are hashed relative to it (base_dir), and
# the working directory that -g would otherwise hash is left out (the debug info keeps the
# first build's path). Exported so that the package tests' consumer builds use it too.
# The shared precompiled header (ZOFF_USE_PCH) is hashed by content, not by its time stamps.
# (An if, not `test && ...`: this file is sourced under set -e and must end with status 0.)
if command -v ccache >/dev/null && [[ "${ZOFF_CCACHE:-1}" == "1" ]]; then
  export CCACHE_DIR="$ZOFF_CCACHE_DIR" CCACHE_NOHASHDIR=1 CCACHE_COMPRESS=1
  CCACHE_BASEDIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  export CCACHE_BASEDIR CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-12G}"
  export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
fi
