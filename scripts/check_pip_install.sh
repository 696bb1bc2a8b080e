#!/usr/bin/env bash
# End-to-end check of the Python package as a user installs it: a new venv made by hand,
# `pip install torch==<pin>` from PyPI, then `pip install <this checkout>` (scikit-build-core
# builds zoff against that venv's torch), then the parity tests against the installed package
# and its `zoff` command: the examples' GPT and a user's GPT (nn.MultiheadAttention,
# nn.LayerNorm, tied head) through zoff.initialize at stages 0-3, worlds 1 and 2, against
# torch.optim.AdamW. Prints the time of each step. Not part of CI (a second ~5.4 GB venv and
# a full build); the venv is removed at the end unless ZOFF_KEEP_PIP_VENV=1.
#   ZOFF_PIP_VENV  where the venv goes (default: ~/.cache/zoff/venv-pip-check)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
REPO="$PWD"
VENV="${ZOFF_PIP_VENV:-$ZOFF_CACHE_ROOT/venv-pip-check}"
TORCH_PIN="$(grep '^torch==' python/requirements.txt)"
timed() {  # timed LABEL CMD...: runs CMD, prints its wall time
  local label="$1" start=$SECONDS
  shift
  echo "+ $*"
  "$@"
  echo "== $label: $((SECONDS - start)) s"
}
cleanup() { [[ "${ZOFF_KEEP_PIP_VENV:-0}" == 1 ]] || rm -rf "$VENV"; }
trap cleanup EXIT
rm -rf "$VENV"
timed "venv" "$ZOFF_BASE_PYTHON" -m venv "$VENV"
# The pins of python/requirements.txt as constraints: the same torch and CUDA wheels.
timed "pip install torch" "$VENV/bin/pip" install --no-cache-dir -q --disable-pip-version-check \
  -c python/requirements.txt "$TORCH_PIN" numpy pytest
timed "pip install zoff" "$VENV/bin/pip" install --no-cache-dir -q --disable-pip-version-check "$REPO"
# From outside the checkout, so `import zoff` can only find the installed package.
cd /tmp
"$VENV/bin/python" -c 'import torch, zoff; print("installed:", zoff.__file__, "torch", torch.__version__)'
timed "parity tests" env ZOFF_EXE="$VENV/bin/zoff" "$VENV/bin/python" -m pytest -q -s \
  -p no:cacheprovider "$REPO/python/tests/test_gpt_exact.py"
