"""scripts/bench_peers.sh's driver: zoff against DeepSpeed, FSDP2 and DDP on the same GPT, the
same global batches and the same AdamW, 2 ranks, rounds alternating in one run.

Round 1's first --gate-steps steps of every run are the correctness gate: each system's loss
and learning rate per step and its first gradient norm against a one-process fp32 PyTorch
AdamW run of the same model and batches (zoff's C++ `zoff train` against its own
`--reference`, which trains on the same batches as it). A system outside the tolerances is
reported as wrong and left out of the table. Then per run: tokens/s (median over the steps
after --warmup, rank 0's step time), each round's ratio to zoff at the same ZeRO stage and
offload, peak RSS per rank, bytes on disk, and the median ms of forward, backward and step.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# The gate. bf16 compute against the fp32 reference: the first step's loss differs by the
# forward's rounding alone (~1e-3 relative), and 20 steps of AdamW at lr <= 3e-4 move the
# curves apart by a few tenths of a percent more; 2% leaves room for that and still fails
# a wrong learning rate, a missing update or a wrong loss. A gradient summed instead of
# averaged over ranks is invisible to the loss (AdamW and clipping undo the scale) but
# doubles the first gradient norm: hence its own check.
# DeepSpeed with bf16 casts the module to bf16 in initialize() and copies its fp32 master from
# it: its master starts on the bf16 grid, from the initial weights rounded to bf16, where
# zoff's, FSDP2's and the reference's start from the fp32 weights. An update smaller than half
# a bf16 ulp then leaves its compute weights where they are until updates add up, so in the
# low-lr warmup it trains measurably slower than the fp32 reference (gpt small: step 4's loss
# 4.992 against 4.887), by design, not by a wrong update: zoff started from the same rounded
# weights gives DeepSpeed's losses within 1e-4 over 6 steps, and the fp32 reference from them
# does not (4.887: in fp32 every update lands). So DeepSpeed's runs are gated against zoff's
# Python engine started from the rounded weights with the same config (zoff itself passes
# the gate against the fp32 reference): the same arithmetic from DeepSpeed's own start.
REFERENCE_OF = {"deepspeed_s2_cpu": "zoff_s2_cpu_bf16_start",
                "deepspeed_s3_nvme": "zoff_s3_nvme_bf16_start"}
GATE_LOSS_RTOL = 0.02
GATE_GRAD_NORM_RTOL = 0.02
GATE_LR_RTOL = 1e-6

BASE_CONFIG = {
    "train_batch_size": 16,
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 1,
    "gradient_clipping": 1.0,
    "steps_per_print": 1000000,
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8,
                                              "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 3e-4,
                                                 "warmup_num_steps": 10, "warmup_type": "linear"}},
    "bf16": {"enabled": True},
}
# Buckets of 5e6 elements for both engines (DeepSpeed's default 5e8 is one bucket for these
# models, leaving the whole reduction after backward); sub-groups of 1e7 (zoff's default;
# DeepSpeed's 1e9 would size its NVMe swap buffers for a billion elements).
ZERO = {
    "s2_cpu": {"stage": 2, "offload_optimizer": {"device": "cpu"}, "reduce_bucket_size": 5000000,
               "overlap_comm": True},
    "s3_nvme": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "NVME"},
                "offload_param": {"device": "nvme", "nvme_path": "NVME"},
                "reduce_bucket_size": 5000000, "overlap_comm": True, "sub_group_size": 10000000},
}
# Which zoff run each peer's ratio is taken against.
ZOFF_OF = {"deepspeed_s2_cpu": "zoff_s2_cpu", "deepspeed_s3_nvme": "zoff_s3_nvme",
           "fsdp2": "zoff_s2_cpu", "fsdp2_offload": "zoff_s2_cpu", "ddp": "zoff_s2_cpu",
           "zoff_cpp_s2_cpu": "zoff_s2_cpu", "zoff_cpp_s3_nvme": "zoff_s3_nvme"}
RUNS = ["zoff_s2_cpu", "zoff_s3_nvme", "zoff_cpp_s2_cpu", "zoff_cpp_s3_nvme", "deepspeed_s2_cpu",
        "deepspeed_s3_nvme", "fsdp2", "fsdp2_offload", "ddp"]


def write_config(out, zero_key, nvme_dir, **overrides):
    """BASE_CONFIG with ZERO[zero_key] (its NVMe paths at nvme_dir) and top-level overrides,
    written under `out`; returns the file's path."""
    cfg = {**json.loads(json.dumps(BASE_CONFIG)), **overrides}
    if zero_key:
        z = json.loads(json.dumps(ZERO[zero_key]).replace("NVME", nvme_dir))
        cfg["zero_optimization"] = z
    path = os.path.join(out, f"config_{zero_key or 'none'}_{os.path.basename(nvme_dir) or 'x'}.json")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)
    return path


def disk_bytes(path):
    """Bytes allocated under `path` (st_blocks: a sparse file counts what it holds)."""
    total = 0
    for parent, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(parent, name)).st_blocks * 512
            except FileNotFoundError:  # removed meanwhile
                pass
    return total


def collect_ranks(work, ranks, disk):
    """A Python run's result from its ranks' files: rank 0's times, the step's loss as the
    mean of the ranks' (each rank's loss is the mean over its own equal slice, so this is
    the global batch's, as the reference computes it), the largest peak RSS."""
    files = [json.load(open(os.path.join(work, f"rank{r}.json"))) for r in range(ranks)]
    steps = [dict(s) for s in files[0]["steps"]]
    for i, s in enumerate(steps):
        s["loss"] = statistics.fmean(f["steps"][i]["loss"] for f in files)
    return {"implementation": files[0]["implementation"], "tokens_per_step": files[0]["tokens_per_step"],
            "steps": steps, "peak_rss": max(f["peak_rss"] for f in files), "disk_bytes": disk}


def first_error_line(text):
    for line in text.splitlines():
        if re.search(r"Error|error:|Exception|failed", line):
            return line.strip()[:300]
    return (text.strip().splitlines() or ["(no output)"])[-1][:300]


class Runner:
    def __init__(self, a):
        self.a = a
        self.zoff = os.path.join(ROOT, a.build_dir, "zoff")
        self.env = dict(os.environ, DS_ACCELERATOR="cpu",
                        OMP_NUM_THREADS=str(max(1, os.cpu_count() // a.ranks)),
                        PYTHONPATH=os.pathsep.join([os.path.join(ROOT, a.build_dir, "python"),
                                                    os.environ.get("PYTHONPATH", "")]))

    def run(self, label, steps, round_):
        """One run of `label`; returns its result dict or {"error": one line}."""
        work = os.path.join(self.a.out, f"{label}_r{round_}")
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        nvme = os.path.join(work, "nvme")
        zero_key = "s3_nvme" if label.endswith("s3_nvme") else "s2_cpu"
        if label.startswith(("fsdp2", "ddp")):
            zero_key = None
        if zero_key == "s3_nvme":
            os.makedirs(nvme)
        # The C++ runs log zoff's own phase times too.
        extra = {"wall_clock_breakdown": True} if label.startswith("zoff_cpp") else {}
        config = write_config(work, zero_key, nvme, **extra)
        if label.startswith("zoff_cpp"):
            result = self.run_cpp(label, config, steps, work, nvme if zero_key == "s3_nvme" else "")
        else:
            result = self.run_python(label, config, steps, work, nvme if zero_key == "s3_nvme" else "")
        shutil.rmtree(nvme, ignore_errors=True)
        return result

    def launch(self, cmd, log, watch="", env=None):
        """Runs cmd (in self.env, or `env`); returns the process and the most bytes `watch` held
        on disk meanwhile (sampled every 0.2 s: every system's tier or swap files, measured the
        same way)."""
        peak, done = [0], threading.Event()

        def sample():
            while not done.wait(0.2):
                peak[0] = max(peak[0], disk_bytes(watch))
        sampler = threading.Thread(target=sample, daemon=True)
        if watch:
            sampler.start()
        try:
            p = subprocess.run(cmd, env=env or self.env, cwd=ROOT, capture_output=True, text=True,
                               timeout=self.a.timeout)
        finally:
            done.set()
            if watch:
                sampler.join()
        with open(log, "w") as f:
            f.write("+ " + " ".join(cmd) + "\n" + p.stdout + p.stderr)
        return p, peak[0]

    def run_python(self, label, config, steps, work, nvme, extra_args=()):
        system = label.split("_")[0]
        cmd = [self.zoff, "launch", "-n", str(self.a.ranks), "--", sys.executable,
               os.path.join(HERE, "peer_train.py"), "--system", system, "--preset", self.a.preset,
               "--config", config, "--steps", str(steps), "--out-dir", work, *extra_args]
        if label == "fsdp2_offload":
            cmd.append("--fsdp-offload")
        p, disk = self.launch(cmd, os.path.join(work, "output.txt"), nvme)
        if p.returncode != 0:
            return {"error": first_error_line(p.stdout + p.stderr)}
        return collect_ranks(work, self.a.ranks, disk)

    def run_cpp(self, label, config, steps, work, nvme):
        log = os.path.join(work, "log.jsonl")
        cmd = [self.zoff, "launch", "-n", str(self.a.ranks), "--", "/usr/bin/time", "-v", self.zoff,
               "train", "--model", "gpt", "--preset", self.a.preset, "--config", config, "--steps",
               str(steps), "--seed", "1", "--log", log, "--no-eval"]
        p, disk = self.launch(cmd, os.path.join(work, "output.txt"), nvme)
        if p.returncode != 0:
            return {"error": first_error_line(p.stdout + p.stderr)}
        rss = [int(v) * 1024 for v in re.findall(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr + p.stdout)]
        rows = [json.loads(line) for line in open(log) if '"event"' not in line]
        tokens = BASE_CONFIG["train_batch_size"] * int(rows[0]["tokens_per_s"] / rows[0]["samples_per_s"])
        out = {"implementation": "zoff train (C++)", "tokens_per_step": tokens,
               "steps": [{"loss": r["loss"], "lr": r["lr"], "grad_norm": r["grad_norm"],
                          "seconds": tokens / r["tokens_per_s"], "times_ms": self.cpp_times(r)}
                         for r in rows],
               "peak_rss": max(rss) if rss else 0, "disk_bytes": disk}
        return out

    @staticmethod
    def cpp_times(row):
        t = row.get("times_ms", {})
        out = {k: t[k] for k in ("forward", "backward", "step") if k in t}
        out.update({f"zoff_{k}": t[k] for k in ("backward_reduce", "optimizer", "allgather") if k in t})
        return out

    def start_matched(self, name, steps):
        """REFERENCE_OF's run `name` ("zoff_<zero key>_bf16_start"): zoff's Python engine with
        that ZeRO config from the initial weights rounded to bf16. Its steps, or SystemExit."""
        zero_key = name[len("zoff_"):-len("_bf16_start")]
        work = os.path.join(self.a.out, name)
        shutil.rmtree(work, ignore_errors=True)
        nvme = os.path.join(work, "nvme")
        os.makedirs(nvme)
        config = write_config(work, zero_key, nvme)
        r = self.run_python(name, config, steps, work, nvme if zero_key == "s3_nvme" else "",
                            ["--start-bf16-rounded"])
        shutil.rmtree(nvme, ignore_errors=True)
        if "error" in r:
            raise SystemExit(f"bench_peers: {name} failed: {r['error']}")
        return r["steps"]

    def reference(self, steps, cpp):
        """The fp32 one-process run the gate compares with: PyTorch (Python systems) or
        `zoff train --reference` (the C++ run's batches)."""
        work = os.path.join(self.a.out, "reference_cpp" if cpp else "reference")
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        # fp32, the whole global batch in one process, on every core (it runs alone; not timed).
        env = dict(self.env, OMP_NUM_THREADS=str(os.cpu_count()))
        config = write_config(work, None, "", bf16={"enabled": False},
                              train_micro_batch_size_per_gpu=BASE_CONFIG["train_batch_size"])
        if cpp:
            log = os.path.join(work, "log.jsonl")
            cmd = [self.zoff, "train", "--model", "gpt", "--preset", self.a.preset, "--config", config,
                   "--steps", str(steps), "--seed", "1", "--log", log, "--no-eval", "--reference",
                   "--threads", str(os.cpu_count())]
            p, _ = self.launch(cmd, os.path.join(work, "output.txt"), env=env)
            if p.returncode != 0:
                raise SystemExit(f"bench_peers: the C++ reference failed: {first_error_line(p.stderr)}")
            return [json.loads(line) for line in open(log) if '"event"' not in line]
        cmd = [sys.executable, os.path.join(HERE, "peer_train.py"), "--system", "reference",
               "--preset", self.a.preset, "--config", config, "--steps", str(steps), "--out-dir", work]
        p, _ = self.launch(cmd, os.path.join(work, "output.txt"), env=env)
        if p.returncode != 0:
            raise SystemExit(f"bench_peers: the reference failed: {first_error_line(p.stdout + p.stderr)}")
        return json.load(open(os.path.join(work, "rank0.json")))["steps"]


def gate(result, ref, steps, ref_name):
    """Worst relative differences over the first `steps` steps against `ref` (the run named
    `ref_name`), and whether they pass."""
    got, want = result["steps"][:steps], ref[:steps]
    rel = lambda a, b: abs(a - b) / max(abs(b), 1e-30)  # noqa: E731
    loss = max(rel(g["loss"], w["loss"]) for g, w in zip(got, want))
    lr = max(abs(g["lr"] - w["lr"]) / max(abs(w["lr"]), 1e-12) for g, w in zip(got, want))
    norm = rel(got[0]["grad_norm"], want[0]["grad_norm"])
    ok = loss <= GATE_LOSS_RTOL and lr <= GATE_LR_RTOL and norm <= GATE_GRAD_NORM_RTOL
    return {"loss_rel": loss, "lr_rel": lr, "first_grad_norm_rel": norm, "passed": ok,
            "reference": ref_name,
            "losses": [round(g["loss"], 5) for g in got], "ref_losses": [round(w["loss"], 5) for w in want]}


def tokens_per_s(result, warmup):
    times = [s["seconds"] for s in result["steps"][warmup:]]
    return result["tokens_per_step"] / statistics.median(times)


def phase_medians(result, warmup):
    rows = [s["times_ms"] for s in result["steps"][warmup:]]
    keys = sorted({k for r in rows for k in r})
    return {k: statistics.median(r[k] for r in rows if k in r) for k in keys}


def fmt_bytes(n):
    return f"{n / 2**30:.2f} GiB" if n else "-"


def print_gate(results, a):
    print(f"\ncorrectness gate: first {a.gate_steps} steps against fp32 one-process AdamW "
          f"(loss rtol {GATE_LOSS_RTOL}, first grad-norm rtol {GATE_GRAD_NORM_RTOL}, lr rtol {GATE_LR_RTOL})")
    for label, rounds in results.items():
        r = rounds[0]
        if "error" in r:
            print(f"  {label:18s} FAILED TO RUN: {r['error']}")
            continue
        g = r["gate"]
        verdict = "ok" if g["passed"] else "WRONG"
        print(f"  {label:18s} {verdict:5s} loss {g['loss_rel']:.2e}  first grad norm "
              f"{g['first_grad_norm_rel']:.2e}  lr {g['lr_rel']:.1e}   ({r['implementation']}; "
              f"against {g.get('reference', 'reference')})")
        if not g["passed"]:
            print(f"    losses    {g['losses']}\n    reference {g['ref_losses']}")


def print_table(results, a):
    print(f"\ngpt {a.preset}, global batch {a.batch}, {a.ranks} ranks, {a.steps} steps per run (median over steps "
          f"{a.warmup}+), {a.rounds} rounds alternating; ratio = zoff / this run, per round")
    print(f"  {'run':18s} {'tokens/s':>9s} {'ratio to zoff':>16s} {'peak RSS/rank':>14s} "
          f"{'disk':>9s}  phases (ms, median: forward / backward / step; zoff's own parts)")
    tps = {label: [tokens_per_s(r, a.warmup) for r in rounds if "error" not in r]
           for label, rounds in results.items()}
    for label, rounds in results.items():
        good = [r for r in rounds if "error" not in r]
        if not good or not good[0]["gate"]["passed"]:
            why = "did not run" if not good else "failed the gate"
            print(f"  {label:18s} {why}: {rounds[0].get('error', '')}")
            continue
        ref = ZOFF_OF.get(label)
        ratios = ([f"{z / p:.2f}x" for z, p in zip(tps[ref], tps[label])] if ref in tps and tps[ref]
                  else ["-"])
        rss = statistics.median(r["peak_rss"] for r in good)
        disk = statistics.median(r["disk_bytes"] for r in good)
        ph = phase_medians(good[-1], a.warmup)
        phases = " / ".join(f"{ph[k]:.0f}" for k in ("forward", "backward", "step") if k in ph)
        own = ", ".join(f"{k[5:]} {v:.0f}" for k, v in ph.items() if k.startswith("zoff_"))
        print(f"  {label:18s} {statistics.median(tps[label]):9.0f} {' '.join(ratios):>16s} "
              f"{fmt_bytes(rss):>14s} {fmt_bytes(disk):>9s}  {phases}{'  (' + own + ')' if own else ''}")


def gate_against(result, label, refs, steps):
    """gate() against the reference run of `label`: REFERENCE_OF's, the C++ reference for
    the C++ runs, else the plain one. refs: reference name -> its steps."""
    name = REFERENCE_OF.get(label, "reference_cpp" if "cpp" in label else "reference")
    if refs.get(name) is None:
        raise SystemExit(f"bench_peers: {label} is gated against {name}, which did not run")
    return gate(result, refs[name], steps, name)


def load_references(out, ranks):
    """The reference runs a finished benchmark left under `out`, by name."""
    refs = {}
    path = os.path.join(out, "reference", "rank0.json")
    if os.path.exists(path):
        refs["reference"] = json.load(open(path))["steps"]
    for name in set(REFERENCE_OF.values()):
        if os.path.exists(os.path.join(out, name, "rank0.json")):
            refs[name] = collect_ranks(os.path.join(out, name), ranks, 0)["steps"]
    cpp_log = os.path.join(out, "reference_cpp", "log.jsonl")
    if os.path.exists(cpp_log):
        refs["reference_cpp"] = [json.loads(line) for line in open(cpp_log) if '"event"' not in line]
    return refs


def report_only(a):
    """The gate and table again from a finished benchmark's files under a.out (results.json,
    the ranks' files, the references' logs)."""
    results = json.load(open(os.path.join(a.out, "results.json")))
    refs = load_references(a.out, a.ranks)
    for label, rounds in results.items():
        for i, r in enumerate(rounds):
            if "error" in r:
                continue
            if "cpp" not in label:
                rounds[i] = collect_ranks(os.path.join(a.out, f"{label}_r{i + 1}"), a.ranks, r["disk_bytes"])
            if i == 0:
                rounds[i]["gate"] = gate_against(rounds[i], label, refs, a.gate_steps)
    a.rounds = max(len(r) for r in results.values())
    print_gate(results, a)
    print_table(results, a)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="small")
    p.add_argument("--batch", type=int, default=BASE_CONFIG["train_batch_size"],
                   help="global batch (sequences of the preset's context), split evenly over the ranks")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--gate-steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--runs", nargs="+", default=RUNS, choices=RUNS)
    p.add_argument("--out", default=os.path.join(ROOT, "runs", "bench_peers"))
    p.add_argument("--build-dir", default="build")
    p.add_argument("--timeout", type=int, default=3600, help="seconds per run")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: re-read the runs under --out and print the gate and table")
    a = p.parse_args()
    if a.batch < a.ranks or a.batch % a.ranks:
        raise SystemExit(f"bench_peers: --batch {a.batch}: must be a positive multiple of --ranks ({a.ranks})")
    # Every config written below (and the C++ run's tokens per step) take the batch from here.
    BASE_CONFIG.update(train_batch_size=a.batch, train_micro_batch_size_per_gpu=a.batch // a.ranks)
    if a.report_only:
        return report_only(a)
    if a.steps < max(a.gate_steps, a.warmup + 3):
        raise SystemExit(f"bench_peers: --steps {a.steps}: must be >= --gate-steps ({a.gate_steps}) "
                         f"and >= --warmup + 3 ({a.warmup + 3})")
    os.makedirs(a.out, exist_ok=True)
    runner = Runner(a)
    refs = {"reference": runner.reference(a.gate_steps, cpp=False)}
    if any("cpp" in r for r in a.runs):
        refs["reference_cpp"] = runner.reference(a.gate_steps, cpp=True)
    for name in sorted({REFERENCE_OF[r] for r in a.runs if r in REFERENCE_OF}):
        refs[name] = runner.start_matched(name, a.gate_steps)
    results = {label: [] for label in a.runs}
    for round_ in range(1, a.rounds + 1):
        order = a.runs if round_ % 2 else list(reversed(a.runs))
        for label in order:
            start = time.time()
            r = runner.run(label, a.steps, round_)
            if round_ == 1 and "error" not in r:
                r["gate"] = gate_against(r, label, refs, a.gate_steps)
            results[label].append(r)
            status = r.get("error") or f"{tokens_per_s(r, a.warmup):.0f} tokens/s"
            print(f"round {round_} {label}: {status} ({time.time() - start:.0f} s)", flush=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f)
    print_gate(results, a)
    print_table(results, a)


if __name__ == "__main__":
    main()
