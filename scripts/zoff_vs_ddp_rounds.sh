# Sourced by the zoff-vs-DDP benchmark scripts: alternate_rounds ROUNDS CMD runs "CMD MODE R"
# for R = 1..ROUNDS and each MODE of $MODES (default "zoff ddp"; a script may offer more, e.g.
# zoff_gloo). Each prints one JSON line with "mode" and "tokens_per_s", and optionally
# "times_ms": phase -> median ms. Echoes each round, then the median tokens/s of each mode, its
# ratio to ddp and each round's own ratio (when ddp is among the modes), and the phase times
# of all modes side by side.
# Needs $PY (the venv's python, with torch).
alternate_rounds() {
  local rounds="$1" cmd="$2" results=() line round mode
  for round in $(seq "$rounds"); do
    for mode in ${MODES:-zoff ddp}; do
      line=$("$cmd" "$mode" "$round")
      echo "round $round: $line"
      results+=("$line")
    done
  done
  printf '%s\n' "${results[@]}" | "$PY" -c '
import json, statistics, sys
rows = [json.loads(l) for l in sys.stdin]
modes = list(dict.fromkeys(r["mode"] for r in rows))
tps = {m: statistics.median(r["tokens_per_s"] for r in rows if r["mode"] == m) for m in modes}
d = tps.get("ddp")  # absent when MODES leaves ddp out: no ratios then
print("tokens/s (median of rounds): " + ", ".join(
    (m if m != "ddp" else "ddp+autocast") + f" {v:,.0f}" for m, v in tps.items()))
for m in modes:
    if m != "ddp" and d is not None:
        print(f"ratio {m}/ddp = {tps[m] / d:.3f}")
        # The ratio within each round: this VM drifts between rounds more than within one.
        per = [a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(
            (r for r in rows if r["mode"] == m), (r for r in rows if r["mode"] == "ddp"))]
        cells = " ".join("%.3f" % x for x in per)
        print(f"  per round: {cells} (median {statistics.median(per):.3f})")
timed = {m: [r["times_ms"] for r in rows if r["mode"] == m and "times_ms" in r] for m in modes}
if all(timed.values()):
    print("ms per step, rank 0 (median of rounds); zoff parts indented; ddp backward includes its allreduce:")
    order = ["forward", "backward", "backward_reduce", "step", "grad_norm", "optimizer", "allgather"]
    seen = [k for m in modes for t in timed[m] for k in t]
    keys = [k for k in order if k in seen] + [k for k in dict.fromkeys(seen) if k not in order]
    for k in keys:
        name = k if k in ("forward", "backward", "step") else "  " + k
        cells = []
        for m in modes:
            v = [t[k] for t in timed[m] if k in t]
            cells.append(f"{m} {statistics.median(v):8.1f}" if v else m + " " + "-".rjust(8))
        print(f"  {name:18} " + "   ".join(cells))'
}
