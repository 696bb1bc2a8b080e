#!/usr/bin/env bash
# Installs everything zoff needs on a bare Debian 12 machine (idempotent): Debian's packages
# with apt, then PyTorch and the other Python packages, pinned, from PyPI into a venv outside
# the clone (scripts/env.sh says where; ZOFF_VENV overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

PACKAGES=(
  build-essential cmake ninja-build pkg-config git clang-format
  ccache                  # compiler cache shared by every checkout (scripts/build.sh)
  libgloo-dev             # Gloo headers that c10d's ProcessGroupGloo.hpp includes (the wheel lacks them)
  libhwy-dev              # Highway: SIMD with run-time dispatch for the optimizer kernels
  nlohmann-json3-dev      # JSON configs, logs
  libcli11-dev            # command line
  liburing-dev            # async NVMe I/O
  fio                     # `zoff bench io` measures the NVMe tier against fio in the same run
  zlib1g-dev              # gzip IDX files, checksums
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-dev pybind11-dev  # the zoff Python extension (python/)
  fortunes                # text corpus for the gpt example
  dataset-fashion-mnist   # images for the cnn example
  procps                  # ps/pkill used by launcher tests
  time                    # /usr/bin/time -v: peak RSS in scripts/bench_stage3.sh
  chromium                # headless rendering test of `zoff report` pages
)
# Packages a caller needs beside zoff's (scripts/setup_peers.sh: DeepSpeed's libaio-dev).
read -r -a extra <<<"${ZOFF_EXTRA_PACKAGES:-}"
PACKAGES+=("${extra[@]}")

install_debian_packages() {
  [[ "${ZOFF_SKIP_APT:-0}" == "1" ]] && return 0
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  if (( ${#missing[@]} == 0 )); then
    echo "setup: all ${#PACKAGES[@]} Debian packages present"
    return 0
  fi
  local sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# The venv holds exactly python/requirements.txt, plus python/requirements-nodeps.txt installed
# without their dependencies; a stamp with the files' hash skips pip when nothing changed. A
# venv made by another Python or a half-finished install is redone.
install_python_packages() {
  local want stamp="$ZOFF_VENV/.zoff-requirements.sha256"
  want="$(cat python/requirements.txt python/requirements-nodeps.txt | sha256sum | cut -d' ' -f1)"
  if [[ -x "$ZOFF_PY" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "setup: venv $ZOFF_VENV up to date (torch $ZOFF_TORCH_PIN)"
    return 0
  fi
  if [[ ! -x "$ZOFF_PY" ]]; then
    echo "setup: creating venv $ZOFF_VENV with $ZOFF_BASE_PYTHON"
    mkdir -p "$(dirname "$ZOFF_VENV")"
    "$ZOFF_BASE_PYTHON" -m venv "$ZOFF_VENV"
  fi
  echo "setup: installing python/requirements.txt into $ZOFF_VENV (torch $ZOFF_TORCH_PIN, ~5.4 GB)"
  "$ZOFF_PY" -m pip install --no-cache-dir -q --disable-pip-version-check -r python/requirements.txt
  "$ZOFF_PY" -m pip install --no-cache-dir -q --disable-pip-version-check --no-deps \
    -r python/requirements-nodeps.txt
  echo "$want" >"$stamp"
}

install_debian_packages
install_python_packages
