"""Shared pieces of the network-namespace tests: who may run them, and the zoff binary."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)


@pytest.fixture(scope="session")
def zoff():
    exe = os.environ.get("ZOFF_EXE", os.path.join(ROOT, "build", "zoff"))
    if not os.path.exists(exe):
        pytest.fail(f"no zoff binary at {exe} (set ZOFF_EXE)")
    return exe
