"""Throughput across two hosts against one: the same `zoff train` as one rank on each of two
hosts (network namespaces joined through a router, Gloo over TCP), as two ranks on one host
(shared memory, and Gloo over loopback), and as two ranks on each of two hosts (shared memory
within, Gloo between; and the flat Gloo mesh), rounds alternating in one run; with the bytes
each step sends over the hosts' links (their veth counters). Root only. Run it alone:

    bash scripts/bench_hosts.sh [--steps 20] [--rounds 2] [--preset small]
"""
import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "net"))

from netns_hosts import Hosts, can_run  # noqa: E402

PORT = 29400
WARMUP_STEPS = 5
RUN_TIMEOUT_S = 3600  # one layout's run; a hung run fails the bench instead of blocking it  # not counted: first steps allocate and fault pages in
GLOO = {"ZOFF_COMM_TRANSPORT": "gloo"}
LAYOUTS = {
    "two hosts x 1 rank (gloo)": {"tag": "two_hosts", "hosts": [0, 1], "ranks": 1, "env": {}},
    "one host x 2 ranks (shm)": {"tag": "one_host_shm", "hosts": [0], "ranks": 2, "env": {}},
    "one host x 2 ranks (gloo)": {"tag": "one_host_gloo", "hosts": [0], "ranks": 2, "env": GLOO},
    # 4 ranks on 2 cores: for the bytes over the links, not for tokens/s.
    "two hosts x 2 ranks (shm+gloo)": {"tag": "two_by_two", "hosts": [0, 1], "ranks": 2, "env": {}},
    "two hosts x 2 ranks (gloo)": {"tag": "two_by_two_gloo", "hosts": [0, 1], "ranks": 2,
                                   "env": GLOO},
}
# The global batch of the config at a micro-batch every layout divides (2 and 4 ranks).
MICRO_BATCH = 4


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--zoff", default=os.path.join(ROOT, "build", "zoff"))
    p.add_argument("--preset", default="small")
    p.add_argument("--config", default=os.path.join(ROOT, "examples", "configs",
                                                    "gpt_small_bf16_stage2.json"))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default=os.path.join(ROOT, "runs", "bench_hosts"))
    args = p.parse_args()
    if args.steps <= WARMUP_STEPS:
        p.error(f"--steps {args.steps}: must exceed the {WARMUP_STEPS} warm-up steps")
    if args.rounds < 1:
        p.error(f"--rounds {args.rounds}: must be at least 1")
    return args


def command(args, layout, node_rank, log):
    return [args.zoff, "launch", "-n", str(layout["ranks"]), "--nnodes", str(len(layout["hosts"])),
            "--node-rank", str(node_rank), "--master-addr", "10.77.0.2", "--master-port",
            str(PORT), "--threads-per-rank", "1", "--", args.zoff, "train", "--model", "gpt",
            "--preset", args.preset,
            "--config", args.run_config, "--steps", str(args.steps), "--no-eval", "--log", log]


def run(args, hosts, name, layout, tag):
    log = os.path.join(args.out, f"{tag}.jsonl")
    if os.path.exists(log):
        os.unlink(log)
    sent_before = [hosts.bytes_sent(h) for h in layout["hosts"]]
    env = dict(os.environ, **layout["env"])
    procs = []
    for node_rank, h in enumerate(layout["hosts"]):
        with open(os.path.join(args.out, f"{tag}.host{h}.out"), "w") as out:
            procs.append(hosts.popen(h, command(args, layout, node_rank, log), stdout=out,
                                     stderr=out, env=env))
    for p in procs:
        if p.wait(timeout=RUN_TIMEOUT_S) != 0:
            sys.exit(f"bench_hosts: {name} failed; see {args.out}/{tag}.host*.out")
    sent = sum(hosts.bytes_sent(h) for h in layout["hosts"]) - sum(sent_before)
    with open(log) as f:
        rows = [json.loads(line) for line in f]
    return {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in rows[WARMUP_STEPS:]),
            "link_bytes_per_step": sent / len(rows)}


def main():
    args = parse_args()
    why_not = can_run()
    if why_not:
        sys.exit(f"bench_hosts: {why_not}")
    os.makedirs(args.out, exist_ok=True)
    with open(args.config) as f:
        config = json.load(f)
    config["train_micro_batch_size_per_gpu"] = MICRO_BATCH
    args.run_config = os.path.join(args.out, "config.json")
    with open(args.run_config, "w") as f:
        json.dump(config, f)
    results = {name: [] for name in LAYOUTS}
    with Hosts(2) as hosts:
        for r in range(args.rounds):
            order = list(LAYOUTS) if r % 2 == 0 else list(reversed(LAYOUTS))
            for name in order:
                tag = f"{LAYOUTS[name]['tag']}_r{r + 1}"
                started = time.monotonic()
                results[name].append(run(args, hosts, name, LAYOUTS[name], tag))
                print(f"round {r + 1} {name}: {results[name][-1]['tokens_per_s']:.0f} tokens/s "
                      f"({time.monotonic() - started:.0f} s)", flush=True)
    report(args, results)


def report(args, results):
    base = "one host x 2 ranks (shm)"
    print(f"\ngpt {args.preset}, {os.path.basename(args.config)} at micro-batch {MICRO_BATCH}, "
          f"{args.steps} steps, tokens/s median of steps {WARMUP_STEPS + 1}-{args.steps}, "
          f"{args.rounds} rounds alternating, 1 thread per rank (4 ranks share the 2 cores)")
    for name, rounds in results.items():
        ratios = ", ".join(f"{x['tokens_per_s'] / y['tokens_per_s']:.2f}x"
                           for x, y in zip(rounds, results[base]))
        mib = statistics.median(x["link_bytes_per_step"] for x in rounds) / 2**20
        print(f"  {name:31s} {statistics.median(x['tokens_per_s'] for x in rounds):8.0f} tokens/s"
              f"  ({ratios} of {base})  {mib:8.2f} MiB per step over the hosts' links")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"args": vars(args), "results": results}, f, indent=1)
    print(f"  command: bash scripts/bench_hosts.sh {' '.join(sys.argv[1:])}")


if __name__ == "__main__":
    main()
