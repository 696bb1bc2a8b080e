#!/usr/bin/env bash
# Benchmark: zoff against DeepSpeed (ZeRO-2 + cpu offload, ZeRO-3 + NVMe), FSDP2 and DDP +
# autocast on the same GPT and batches, 2 ranks, rounds alternating in one run, behind a
# correctness gate against one-process fp32 AdamW (scripts/peers/bench.py says how).
# Sets up the peers (scripts/setup_peers.sh) and builds zoff first.
#   Arguments go to scripts/peers/bench.py: --preset small|medium, --batch B (global), --steps N,
#   --gate-steps G, --warmup W, --rounds R,
#   --runs LABEL..., --out DIR (default runs/bench_peers).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_peers.sh
bash scripts/build.sh --target zoff zoff_python
source scripts/env.sh
PEERS_VENV="${ZOFF_PEERS_VENV:-$ZOFF_CACHE_ROOT/venv-peers}"
# DeepSpeed JIT-compiles its CPU Adam and async I/O ops on first use (1-2 minutes each):
# their build cache lives beside the venvs, outside the clone.
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$ZOFF_CACHE_ROOT/torch_extensions}"
echo "+ $PEERS_VENV/bin/python scripts/peers/bench.py $*"
exec "$PEERS_VENV/bin/python" scripts/peers/bench.py --build-dir "${ZOFF_BUILD_DIR:-build}" "$@"
