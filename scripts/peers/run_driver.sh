#!/usr/bin/env bash
# Runs one of the peers benchmarks' Python drivers (scripts/peers/DRIVER.py) in the peers'
# venv: sets up the peers (scripts/setup_peers.sh) and builds zoff first. For
# scripts/bench_peers.sh and scripts/bench_capacity.sh.
# Usage: scripts/peers/run_driver.sh DRIVER [driver arguments...]
set -euo pipefail
cd "$(dirname "$0")/../.."
driver="${1:?usage: scripts/peers/run_driver.sh DRIVER [arguments...]}"
shift
[[ -f "scripts/peers/$driver.py" ]] || { echo "run_driver: no scripts/peers/$driver.py" >&2; exit 2; }
bash scripts/setup_peers.sh
bash scripts/build.sh --target zoff zoff_python
source scripts/env.sh
PEERS_VENV="${ZOFF_PEERS_VENV:-$ZOFF_CACHE_ROOT/venv-peers}"
# DeepSpeed JIT-compiles its CPU Adam and async I/O ops on first use (1-2 minutes each):
# their build cache lives beside the venvs, outside the clone.
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$ZOFF_CACHE_ROOT/torch_extensions}"
echo "+ $PEERS_VENV/bin/python scripts/peers/$driver.py $*"
exec "$PEERS_VENV/bin/python" "scripts/peers/$driver.py" --build-dir "${ZOFF_BUILD_DIR:-build}" "$@"
