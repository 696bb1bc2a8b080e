#!/usr/bin/env bash
# Benchmark: the capacity ladder (issue 45). At gpt xl's width, context 256, batch 1, one rank,
# the largest depth zoff (stage 3, everything on disk) and DeepSpeed ZeRO-Infinity (stage 3,
# parameters and optimizer on NVMe, zero.Init) each train for 2 steps on this machine, and
# what stops each one step up (scripts/peers/capacity.py says how). Sets up the peers
# (scripts/setup_peers.sh) and builds zoff first. Run it alone: hours, and most of the disk.
#   Arguments go to scripts/peers/capacity.py: --systems, --zoff-depths, --deepspeed-depths
#   (comma-separated, ascending), --steps, --context, --dir, --out, --timeout.
set -euo pipefail
exec bash "$(dirname "$0")/peers/run_driver.sh" capacity "$@"
