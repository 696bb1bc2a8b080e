#!/usr/bin/env bash
# Benchmark: zoff against DeepSpeed (ZeRO-2 + cpu offload, ZeRO-3 + NVMe), FSDP2 and DDP +
# autocast on the same GPT and batches, 2 ranks, rounds alternating in one run, behind a
# correctness gate against one-process fp32 AdamW (scripts/peers/bench.py says how).
# Sets up the peers (scripts/setup_peers.sh) and builds zoff first.
#   Arguments go to scripts/peers/bench.py: --preset small|medium, --batch B (global), --steps N,
#   --gate-steps G, --warmup W, --rounds R,
#   --runs LABEL..., --out DIR (default runs/bench_peers).
set -euo pipefail
exec bash "$(dirname "$0")/peers/run_driver.sh" bench "$@"
