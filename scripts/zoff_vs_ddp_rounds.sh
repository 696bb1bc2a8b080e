# Sourced by the zoff-vs-DDP benchmark scripts: alternate_rounds ROUNDS CMD runs "CMD zoff R"
# and "CMD ddp R" for R = 1..ROUNDS (each prints one JSON line with "mode" and
# "tokens_per_s"), echoes each round, then the median tokens/s of each mode and their ratio.
# Needs $PY (Debian's python3).
alternate_rounds() {
  local rounds="$1" cmd="$2" results=() line round mode
  for round in $(seq "$rounds"); do
    for mode in zoff ddp; do
      line=$("$cmd" "$mode" "$round")
      echo "round $round: $line"
      results+=("$line")
    done
  done
  printf '%s\n' "${results[@]}" | "$PY" -c '
import json, statistics, sys
rows = [json.loads(l) for l in sys.stdin]
z, d = (statistics.median(r["tokens_per_s"] for r in rows if r["mode"] == m) for m in ("zoff", "ddp"))
print(f"tokens/s (median of rounds): zoff {z:,.0f}, ddp+autocast {d:,.0f}; ratio zoff/ddp = {z / d:.3f}")'
}
