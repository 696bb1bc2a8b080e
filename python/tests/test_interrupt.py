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
    for line in p.stdout:  # wait until training runs
        if "step" in line and "loss" in line or time.time() > deadline:
            break
    p.send_signal(signal.SIGINT)
    t0 = time.time()
    out, _ = p.communicate(timeout=60)
    assert time.time() - t0 < 30, out
    assert p.returncode != 0
    assert "KeyboardInterrupt" in out, out
