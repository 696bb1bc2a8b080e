"""Hosts for tests on one machine: network namespaces, each with its own address, joined by
veth pairs through a router namespace, with faults on their links (cut, degraded) and on
their processes (stopped, killed). Needs root and iproute2.

    with Hosts(3) as hosts:          # zoffnet<pid>-h0..h2 and zoffnet<pid>-r
        p = hosts.popen(1, ["zoff", "launch", ...])
        hosts.cut(1)                  # host 1's cable pulled at the router
        hosts.signal(1, signal.SIGSTOP)

Host i is 10.77.i.2/24 behind the router's 10.77.i.1; only these addresses, inside these
namespaces, are ever used. Everything is removed on exit. If the test itself is killed, the
processes it started die with it (PR_SET_PDEATHSIG) and the next Hosts() removes the
namespaces left (those whose owner process is gone); from a shell:
`python3 tests/net/netns_hosts.py clean`.
"""
import ctypes
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

PREFIX = "zoffnet"
HERE = os.path.dirname(os.path.abspath(__file__))
WIRE_TABLE = "100"  # routing table that sends forwarded packets into the wire
WIRE_DEVICE = "zwire"


def ip(*args, check=True):
    """Runs `ip ARGS`; raises with ip's own message when it fails."""
    p = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {p.stderr.strip()}")
    return p.stdout


PR_SET_PDEATHSIG = 1


def die_with_parent():
    """In a child before exec: SIGKILL when the process that started it dies, so a killed
    test leaves no launcher running (the launcher's ranks die with it in turn)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def namespace_pids(name):
    out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout
    return [int(pid) for pid in out.split()]


def kill_and_delete(name):
    """Kills every process in namespace `name` (SIGCONT first: a stopped process cannot
    die), then deletes it; its veth ends go with it."""
    for _ in range(50):
        pids = namespace_pids(name)
        if not pids:
            break
        for pid in pids:
            for sig in (signal.SIGKILL, signal.SIGCONT):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        time.sleep(0.1)
    ip("netns", "del", name, check=False)


def alive(pid):
    """Whether process `pid` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def remove_stale():
    """Deletes the namespaces of earlier runs whose owner process no longer runs."""
    for line in ip("netns", "list").splitlines():
        m = re.match(rf"({PREFIX}(\d+)-\S+)", line)
        if m and not alive(int(m.group(2))):
            kill_and_delete(m.group(1))


def can_run():
    """'' when this process can build namespaces, else a one-line reason."""
    if os.geteuid() != 0:
        return "network-namespace tests need root (ip netns)"
    try:
        ip("netns", "list")
    except (OSError, RuntimeError) as e:
        return f"ip netns does not work here: {e}"
    return ""


class Hosts:
    def __init__(self, count):
        if not 1 <= count <= 8:
            raise ValueError(f"Hosts({count}): between 1 and 8 hosts")
        self.count = count
        self.tag = f"{PREFIX}{os.getpid()}"
        self.router = f"{self.tag}-r"
        self.names = [f"{self.tag}-h{i}" for i in range(count)]
        self.wire = None

    def address(self, i):
        return f"10.77.{i}.2"

    def __enter__(self):
        remove_stale()
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def _build(self):
        ip("netns", "add", self.router)
        self.sysctl(self.router, "net.ipv4.ip_forward", "1")
        # Forwarded packets return from the wire on another device than their route's.
        self.sysctl(self.router, "net.ipv4.conf.all.rp_filter", "0")
        ip("-n", self.router, "link", "set", "lo", "up")
        for i, name in enumerate(self.names):
            ip("netns", "add", name)
            near, far = f"zn{os.getpid() % 10**7}h{i}", f"zn{os.getpid() % 10**7}r{i}"
            ip("link", "add", near, "type", "veth", "peer", "name", far)
            ip("link", "set", near, "netns", name)
            ip("link", "set", far, "netns", self.router)
            ip("-n", name, "link", "set", near, "name", "eth0")
            ip("-n", self.router, "link", "set", far, "name", f"h{i}")
            ip("-n", name, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
            ip("-n", self.router, "addr", "add", f"10.77.{i}.1/24", "dev", f"h{i}")
            for ns, dev in ((name, "eth0"), (name, "lo"), (self.router, f"h{i}")):
                ip("-n", ns, "link", "set", dev, "up")
            ip("-n", name, "route", "add", "default", "via", f"10.77.{i}.1")

    @staticmethod
    def sysctl(ns, key, value):
        subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", f"{key}={value}"], check=True)

    def close(self):
        try:
            self.heal()
        finally:
            for name in [*self.names, self.router]:
                kill_and_delete(name)

    # Processes.
    def popen(self, i, argv, **kwargs):
        """Starts argv in host i (its own session, so a signal to the test reaches it only
        through us; killed if the test dies)."""
        return subprocess.Popen(["ip", "netns", "exec", self.names[i], *argv],
                                start_new_session=True, preexec_fn=die_with_parent, **kwargs)

    def pids(self, i):
        return namespace_pids(self.names[i])

    def signal(self, i, sig):
        """Sends sig to every process of host i (launcher and ranks at once)."""
        for pid in self.pids(i):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    # Links.
    def cut(self, i):
        """Pulls host i's cable: its veth goes down. The other hosts' packets to it vanish
        without an answer (as over a failed link); host i's own sends fail at once."""
        ip("-n", self.names[i], "link", "set", "eth0", "down")

    def degrade(self, delay_ms, loss, seed=1):
        """Every packet the router forwards goes through the wire: delay_ms one way, a
        fraction `loss` dropped. Needs /dev/net/tun."""
        ready = tempfile.NamedTemporaryFile(prefix="zoffnet-wire-", delete=False).name
        os.unlink(ready)
        argv = ["ip", "netns", "exec", self.router, sys.executable, os.path.join(HERE, "wire.py"),
                "--name", WIRE_DEVICE, "--delay-ms", str(delay_ms), "--loss", str(loss),
                "--seed", str(seed), "--ready", ready]
        self.wire = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 10
        while not os.path.exists(ready):
            if self.wire.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the wire did not start (exit {self.wire.poll()})")
            time.sleep(0.02)
        os.unlink(ready)
        self.sysctl(self.router, f"net.ipv4.conf.{WIRE_DEVICE}.rp_filter", "0")
        ip("-n", self.router, "link", "set", WIRE_DEVICE, "up")
        ip("-n", self.router, "route", "add", "default", "dev", WIRE_DEVICE, "table", WIRE_TABLE)
        for i in range(self.count):
            ip("-n", self.router, "rule", "add", "iif", f"h{i}", "lookup", WIRE_TABLE)

    def heal(self):
        """Ends a degrade(); returns the wire's counts {"forwarded": n, "dropped": m} (empty
        without a wire)."""
        if self.wire is None:
            return {}
        wire, self.wire = self.wire, None
        for i in range(self.count):
            ip("-n", self.router, "rule", "del", "iif", f"h{i}", "lookup", WIRE_TABLE, check=False)
        wire.terminate()
        try:
            out, _ = wire.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            wire.kill()
            out, _ = wire.communicate()
        m = re.search(r"(\d+) packets forwarded, (\d+) dropped", out or "")
        return {"forwarded": int(m[1]), "dropped": int(m[2])} if m else {}

    def bytes_sent(self, i):
        """Bytes host i has sent on its link so far (the veth's counter)."""
        out = subprocess.run(["ip", "netns", "exec", self.names[i], "cat",
                              "/sys/class/net/eth0/statistics/tx_bytes"],
                             capture_output=True, text=True, check=True).stdout
        return int(out)


def main(argv):
    if argv[:1] == ["clean"]:
        remove_stale()
        return 0
    print(f"usage: {sys.argv[0]} clean   (removes namespaces left by killed runs)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
