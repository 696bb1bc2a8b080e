"""Training across two hosts (network namespaces) over a link that delays every packet and
drops some: the run goes on and ends with the same losses, bit for bit, as over a clean link.
Root only (skipped otherwise, with the reason)."""
import os
import time

import pytest

from netns_hosts import Hosts, can_run
from training_job import Job

_why_not = can_run() or ("" if os.path.exists("/dev/net/tun") else "no /dev/net/tun (the wire)")
if _why_not:
    pytest.skip(_why_not, allow_module_level=True)

STEPS = 6
# The mlp (6.8k parameters, ~27 KB of gradients per step): over 10% loss TCP moves some 100
# KB/s, and what this test is about is that every collective, rendezvous and heartbeat gets
# through, not bandwidth (scripts/bench_hosts.sh measures that on a clean link).
MODEL = ("mlp", "tiny")
DELAY_MS = 100  # one way: 200 ms round trips
LOSS = 0.10  # of the packets the router forwards, both ways
RUN_TIMEOUT_S = 400


def train(hosts, tmp_path, name, zoff):
    started = time.monotonic()
    job = Job(hosts, [0, 1], 1, str(tmp_path), name, STEPS, model=MODEL).start(zoff)
    exits = job.wait(RUN_TIMEOUT_S)
    assert len(exits) == 2 and all(rc == 0 for rc, _ in exits.values()), job.output()
    return job.losses(), time.monotonic() - started


def test_delay_and_loss_change_nothing_but_the_time(zoff, tmp_path):
    with Hosts(2) as hosts:
        clean, clean_s = train(hosts, tmp_path, "clean", zoff)
        hosts.degrade(DELAY_MS, LOSS)
        degraded, degraded_s = train(hosts, tmp_path, "degraded", zoff)
        wire = hosts.heal()
    assert sorted(clean) == list(range(1, STEPS + 1)), clean
    assert degraded == clean, f"over the degraded link {degraded} != {clean}"
    # The packets really went through the wire, and it really dropped and delayed them.
    assert wire.get("forwarded", 0) > 0 and wire.get("dropped", 0) > 0, wire
    assert degraded_s > clean_s + STEPS * 2 * DELAY_MS / 1000, (degraded_s, clean_s)
    print(f"\nFIGURE degraded link (delay {DELAY_MS} ms one way, loss {LOSS:.0%}): {STEPS} steps "
          f"with bitwise the clean link's losses; {degraded_s:.1f} s against {clean_s:.1f} s "
          f"clean, rendezvous included; the wire forwarded {wire['forwarded']} packets and dropped "
          f"{wire['dropped']}")
