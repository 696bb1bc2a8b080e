#!/usr/bin/env bash
# Builds zoff against the oldest supported PyTorch (2.11.0, ZOFF_TORCH_MIN_VERSION in
# CMakeLists.txt) in a second venv and runs the Python parity tests there (the GPT through
# zoff against torch.optim.AdamW, and bf16 Python vs C++) and engine tests over Gloo (the
# wheel's Gloo with Debian's headers) and the GPU path's CPU stand-in. Not part of CI (a
# second 5 GB venv and a full build); run it when LibTorch-facing code changes.
#   ZOFF_MIN_VENV  the venv (default: next to the main one)
#   ZOFF_MIN_BUILD_DIR  its build tree (default: build-torch-2.11.0)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
MIN_TORCH=2.11.0
MIN_VENV="${ZOFF_MIN_VENV:-$ZOFF_CACHE_ROOT/venv-torch-$MIN_TORCH}"
BUILD_DIR="${ZOFF_MIN_BUILD_DIR:-build-torch-$MIN_TORCH}"
if [[ ! -x "$MIN_VENV/bin/python" ]]; then
  "$ZOFF_BASE_PYTHON" -m venv "$MIN_VENV"
fi
"$MIN_VENV/bin/pip" install --no-cache-dir -q --disable-pip-version-check "torch==$MIN_TORCH" \
  "$(grep '^pytest==' python/requirements.txt)" "$(grep '^numpy==' python/requirements.txt)"
echo "check_torch_min: torch $("$MIN_VENV/bin/python" -c 'import torch; print(torch.__version__)')"
ZOFF_VENV="$MIN_VENV" ZOFF_PY="$MIN_VENV/bin/python" ZOFF_BUILD_DIR="$BUILD_DIR" \
  bash scripts/build.sh --target zoff zoff_python zoff_test_engine
"$BUILD_DIR/zoff_test_engine" \
  --gtest_filter='MixedPrecision.Bf16WithCpuOffloadTracksFp32:DevicePath*:DeviceTransfer*'
PYTHONPATH="$BUILD_DIR/python" ZOFF_EXE="$BUILD_DIR/zoff" "$MIN_VENV/bin/python" -m pytest -q \
  -p no:cacheprovider python/tests/test_gpt_exact.py python/tests/test_bf16_vs_cpp.py
