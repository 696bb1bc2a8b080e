# Sourced by the zoff-vs-DDP benchmark scripts: alternate_rounds ROUNDS CMD runs "CMD zoff R"
# and "CMD ddp R" for R = 1..ROUNDS (each prints one JSON line with "mode" and
# "tokens_per_s", and optionally "times_ms": phase -> median ms), echoes each round, then the
# median tokens/s of each mode and their ratio, and the phase times of both side by side.
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
print(f"tokens/s (median of rounds): zoff {z:,.0f}, ddp+autocast {d:,.0f}; ratio zoff/ddp = {z / d:.3f}")
timed = {m: [r["times_ms"] for r in rows if r["mode"] == m and "times_ms" in r] for m in ("zoff", "ddp")}
if timed["zoff"] and timed["ddp"]:
    print("ms per step, rank 0 (median of rounds); zoff parts indented; ddp backward includes its allreduce:")
    order = ["forward", "backward", "backward_reduce", "step", "grad_norm", "optimizer", "allgather"]
    seen = [k for m in ("zoff", "ddp") for t in timed[m] for k in t]
    keys = [k for k in order if k in seen] + [k for k in dict.fromkeys(seen) if k not in order]
    for k in keys:
        v = [statistics.median(t[k] for t in timed[m] if k in t) if any(k in t for t in timed[m])
             else None for m in ("zoff", "ddp")]
        name = k if k in ("forward", "backward", "step") else "  " + k
        print(f"  {name:18} zoff {v[0]:8.1f}   ddp " + (f"{v[1]:8.1f}" if v[1] is not None else "       -"))'
}
