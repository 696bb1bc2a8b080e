"""A `zoff train` job spread over the namespaces of netns_hosts.Hosts: one `zoff launch` per
host, with what each host printed, when it exited and how."""
import json
import os
import subprocess
import threading
import time

PORT = 29400  # each namespace has its own ports: nothing else listens there

# A global batch every world size of the tests divides (2, 3 and 4 ranks).
CONFIG = {
    "train_batch_size": 48,
    "train_micro_batch_size_per_gpu": 4,
    "gradient_clipping": 1.0,
    "steps_per_print": 1000,
    "optimizer": {"type": "AdamW",
                  "params": {"lr": 0.003, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 5, "warmup_type": "linear"}},
    "zero_optimization": {"stage": 2, "overlap_comm": True, "contiguous_gradients": True},
}
HEARTBEAT_S = 5  # --heartbeat-timeout
COMM_TIMEOUT_S = 20  # --comm-timeout


def write_config(directory):
    path = os.path.join(directory, "config.json")
    with open(path, "w") as f:
        json.dump(CONFIG, f)
    return path


class Job:
    """`zoff train` on `ranks` ranks in each of hosts `host_ids` (node rank = position;
    the first is the master)."""

    def __init__(self, hosts, host_ids, ranks, workdir, name, steps, train_args=(),
                 model=("gpt", "tiny")):
        self.hosts, self.host_ids, self.ranks = hosts, list(host_ids), ranks
        self.model = model
        self.dir = os.path.join(workdir, name)
        os.makedirs(self.dir)
        self.log = os.path.join(self.dir, "steps.jsonl")
        self.steps = steps
        self.train_args = list(train_args)
        self.procs, self.exited = {}, {}

    def command(self, node_rank, zoff):
        master = self.hosts.address(self.host_ids[0])
        train = [zoff, "train", "--model", self.model[0], "--preset", self.model[1], "--no-eval",
                 "--config", write_config(self.dir), "--steps", str(self.steps),
                 "--comm-timeout", str(COMM_TIMEOUT_S), "--heartbeat-timeout", str(HEARTBEAT_S),
                 "--log", self.log, *self.train_args]
        return [zoff, "launch", "-n", str(self.ranks), "--nnodes", str(len(self.host_ids)),
                "--node-rank", str(node_rank), "--master-addr", master, "--master-port",
                str(PORT), "--threads-per-rank", "1", "--", *train]

    def start(self, zoff):
        for node_rank, host in enumerate(self.host_ids):
            with open(os.path.join(self.dir, f"host{host}.out"), "w") as out:
                p = self.hosts.popen(host, self.command(node_rank, zoff), stdout=out,
                                     stderr=subprocess.STDOUT)
            self.procs[host] = p
            threading.Thread(target=self._watch, args=(host, p), daemon=True).start()
        return self

    def _watch(self, host, p):
        rc = p.wait()
        self.exited[host] = (rc, time.monotonic())

    def wait_for_step(self, step, timeout_s):
        """Blocks until the log has `step` rows; raises with the hosts' output otherwise."""
        deadline = time.monotonic() + timeout_s
        while len(self.losses()) < step:
            if self.exited or time.monotonic() > deadline:
                raise AssertionError(f"no step {step} within {timeout_s} s:\n{self.output()}")
            time.sleep(0.05)

    def wait(self, timeout_s):
        """Waits for every launcher; returns {host: (exit code, monotonic time)}."""
        deadline = time.monotonic() + timeout_s
        while len(self.exited) < len(self.procs) and time.monotonic() < deadline:
            time.sleep(0.05)
        return dict(self.exited)

    def losses(self):
        """{step: loss} of the steps logged so far (rank 0's log)."""
        if not os.path.exists(self.log):
            return {}
        with open(self.log) as f:
            rows = [json.loads(line) for line in f if line.endswith("\n")]
        return {row["step"]: row["loss"] for row in rows}

    def host_output(self, host):
        with open(os.path.join(self.dir, f"host{host}.out")) as f:
            return f.read()

    def output(self):
        return "\n".join(f"--- host {h}:\n{self.host_output(h)[-3000:]}" for h in self.host_ids)

    def error_line(self, host):
        """The first error zoff printed on host `host` ('' if none): a rank's
        "zoff: error: ..." line, else its launcher's."""
        lines = self.host_output(host).splitlines()
        for marker in ("zoff: error:", "zoff launch:"):
            for line in lines:
                if marker in line:
                    return line.strip()
        return ""
