"""Shared pieces of the Python tests: the tiny GPT, its config, and running N ranks."""
import json
import os
import subprocess
import sys

import pytest

# PyTorch 2.11's c10d flight recorder races when two Gloo groups of one process issue
# collectives at once (the workers run their own group beside zoff's; tests/process_env.cpp).
os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "0")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))  # gpt.py
sys.path.insert(0, HERE)


def zoff_exe():
    exe = os.environ.get("ZOFF_EXE", os.path.join(ROOT, "build", "zoff"))
    if not os.path.exists(exe):
        pytest.skip(f"no zoff binary at {exe} (set ZOFF_EXE)")
    return exe


def run_ranks(n, script, args, tmp_path, timeout=240):
    """Runs `python3 script args --out FILE` on n ranks under `zoff launch` (which sets
    torchrun's variables) and returns what rank 0 wrote to FILE (JSON)."""
    out = tmp_path / f"result_{n}.json"
    # One intra-op thread per rank: OpenMP threads spinning on a 2-core machine shared with
    # other jobs made a 1-rank run 20x slower.
    cmd = [zoff_exe(), "launch", "-n", str(n), "--threads-per-rank", "1", "--", sys.executable, os.path.join(HERE, script),
           *args, "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    with open(out) as f:
        return json.load(f)
