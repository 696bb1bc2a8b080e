#!/usr/bin/env bash
# Installs every system package zoff needs on a bare Debian 12 machine (idempotent).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git clang-format
  libtorch-dev            # LibTorch 1.13.1 (CPU) with c10d/Gloo
  libgloo-dev             # Gloo headers that c10d's ProcessGroupGloo.hpp includes
  libopenblas0-openmp     # without it LibTorch GEMM falls back to reference BLAS (~30x slower)
  libhwy-dev              # Highway: SIMD with run-time dispatch for the optimizer kernels
  nlohmann-json3-dev      # JSON configs, logs
  libcli11-dev            # command line
  liburing-dev            # async NVMe I/O
  fio                     # `zoff bench io` measures the NVMe tier against fio in the same run
  zlib1g-dev              # gzip IDX files, checksums
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-torch   # independent numerical reference in tests; `import zoff` builds against it
  python3-dev pybind11-dev  # the zoff Python extension (python/)
  python3-pytest          # the Python package's tests
  fortunes                # text corpus for the gpt example
  dataset-fashion-mnist   # images for the cnn example
  procps                  # ps/pkill used by launcher tests
  time                    # /usr/bin/time -v: peak RSS in scripts/bench_stage3.sh
  chromium                # headless rendering test of `zoff report` pages
)

if [[ "${ZOFF_SKIP_APT:-0}" == "1" ]]; then
  exit 0
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if (( ${#missing[@]} == 0 )); then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
