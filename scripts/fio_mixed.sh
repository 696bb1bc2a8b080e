#!/usr/bin/env bash
# The disk's own sequential O_DIRECT bandwidth for the disk tier's traffic (fio, io_uring):
# read, write, and reads and writes at once (RWMIX % reads; a disk-tier step at stage 3 with
# streamed gradients reads 6+4 and writes 6 bytes per element: ~57-62%), PASSES passes of
# SECONDS each, so that a cloud disk's bursts show beside what it sustains. The bound that
# the 11.33B run's I/O wait is measured against (docs/figures.md, "Beyond RAM").
#   DIR=/var/tmp BS=1M DEPTH=8 SECONDS_EACH=12 PASSES=3 RWMIX=57 bash scripts/fio_mixed.sh
set -euo pipefail
DIR="${DIR:-/var/tmp}"
BS="${BS:-1M}"
DEPTH="${DEPTH:-8}"
SECONDS_EACH="${SECONDS_EACH:-12}"
PASSES="${PASSES:-3}"
RWMIX="${RWMIX:-57}"
SIZE="${SIZE:-8G}"
[[ -d $DIR ]] || { echo "fio_mixed: DIR=$DIR is not a directory" >&2; exit 2; }
command -v fio >/dev/null || { echo "fio_mixed: fio is not installed (scripts/setup.sh installs it)" >&2; exit 2; }
file="$DIR/zoff_fio_mixed.$$.dat"
trap 'rm -f "$file"' EXIT
common=(--filename="$file" --size="$SIZE" --bs="$BS" --direct=1 --ioengine=io_uring
        --iodepth="$DEPTH" --output-format=json)
timeout 600 fio --name=prepare "${common[@]}" --rw=write >/dev/null
pass() {  # rw [rwmixread]
  local extra=()
  [[ $1 == rw ]] && extra=(--rwmixread="$RWMIX")
  timeout $((SECONDS_EACH + 120)) fio --name=probe "${common[@]}" --rw="$1" "${extra[@]}" \
      --runtime="$SECONDS_EACH" --time_based |
    python3 -c "import json, sys
j = json.load(sys.stdin)['jobs'][0]
r, w = j['read']['bw_bytes'] / 1e9, j['write']['bw_bytes'] / 1e9
print(f'{sys.argv[1]:5s} read {r:5.2f}  write {w:5.2f}  total {r + w:5.2f} GB/s')" "$1"
}
echo "fio_mixed: $DIR, bs $BS, depth $DEPTH, $PASSES x $SECONDS_EACH s, mixed = $RWMIX% reads"
for ((i = 1; i <= PASSES; i++)); do
  pass read
  pass write
  pass rw
done
