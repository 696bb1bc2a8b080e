"""Ctrl-C on a 2-rank Python job under `zoff launch` stops every rank within seconds."""
import os
import signal
import subprocess
import sys
import time

from conftest import ROOT, zoff_exe


def test_sigint_stops_a_two_rank_job(tmp_path):
    script = os.path.join(ROOT, "examples", "python", "train_gpt.py")
    cmd = [zoff_exe(), "launch", "-n", "2", "--threads-per-rank", "1", "--", sys.executable, script,
           "--steps", "100000", "--precision", "fp32", "--offload", "none", "--batch", "4", "--micro", "2"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    seen = []  # what the job printed before the signal: a failure shows all of it
    for line in p.stdout:  # wait until training runs
        seen.append(line)
        if "step" in line and "loss" in line or time.time() > deadline:
            break
    assert p.poll() is None, "the job ended before training ran:\n" + "".join(seen)
    p.send_signal(signal.SIGINT)
    t0 = time.time()
    rest, _ = p.communicate(timeout=60)
    out = "".join(seen) + rest
    assert time.time() - t0 < 30, out
    assert p.returncode != 0
    assert "KeyboardInterrupt" in out, out
