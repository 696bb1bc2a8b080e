#!/usr/bin/env bash
# Throughput of 2 ranks on two hosts (network namespaces, Gloo over veth) against 2 ranks on
# one host (shared memory, and Gloo over loopback), and the bytes per step over the links of
# two hosts x 2 ranks with and without shared memory within each host; rounds alternating.
# Root only; run it alone on the machine. Options: scripts/bench_hosts.py -h.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 scripts/bench_hosts.py --zoff "${ZOFF_BUILD_DIR:-build}/zoff" "$@"
