"""A degraded link for the network-namespace tests: forwards IP packets through a TUN device
with a fixed one-way delay and a random loss.

Why not `tc qdisc ... netem`: this machine's kernel is built without it
(CONFIG_NET_SCH_NETEM is not set), so the router namespace hands the packets it forwards to
this process instead (policy routing, see netns_hosts.Hosts.degrade) and gets them back after
the delay. Run inside the router namespace:

    python3 wire.py --name zwire --delay-ms 50 --loss 0.1 --seed 1 --ready FILE

It creates the TUN device (gone when the process exits), writes FILE once it is open, and on
SIGTERM prints one line: packets forwarded and dropped.
"""
import argparse
import collections
import fcntl
import os
import random
import select
import signal
import struct
import sys
import time

TUNSETIFF = 0x400454CA  # _IOW('T', 202, int)
IFF_TUN = 0x0001  # IP packets, no Ethernet header
IFF_NO_PI = 0x1000  # no 4-byte packet-information prefix
MAX_PACKET = 65536  # bytes: the largest IP packet


def open_tun(name):
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", required=True, help="TUN device name (at most 15 bytes)")
    p.add_argument("--delay-ms", type=float, default=0.0, help="one-way delay per packet")
    p.add_argument("--loss", type=float, default=0.0, help="probability a packet is dropped")
    p.add_argument("--seed", type=int, default=0, help="seed of the loss decisions")
    p.add_argument("--ready", required=True, help="file written once the device exists")
    args = p.parse_args(argv)
    if not 0.0 <= args.loss < 1.0:
        p.error(f"--loss {args.loss}: must be in [0, 1)")
    if args.delay_ms < 0:
        p.error(f"--delay-ms {args.delay_ms}: must be >= 0")
    if not 0 < len(args.name.encode()) <= 15:
        p.error(f"--name {args.name!r}: must be 1 to 15 bytes")
    return args


class Line:
    """Packets in flight, in arrival order (a fixed delay keeps them in that order)."""

    def __init__(self, fd, delay_s, loss, seed):
        self.fd, self.delay_s, self.loss = fd, delay_s, loss
        self.rng = random.Random(seed)
        self.queue = collections.deque()  # (due time in s, packet)
        self.forwarded = self.dropped = 0

    def take(self, now):
        while True:
            try:
                packet = os.read(self.fd, MAX_PACKET)
            except BlockingIOError:
                return
            if self.rng.random() < self.loss:
                self.dropped += 1
            else:
                self.queue.append((now + self.delay_s, packet))

    def release(self, now):
        while self.queue and self.queue[0][0] <= now:
            try:
                os.write(self.fd, self.queue.popleft()[1])
                self.forwarded += 1
            except BlockingIOError:  # the device's queue is full: lost, as on a real link
                self.dropped += 1

    def wait_s(self, now):
        return max(0.0, self.queue[0][0] - now) if self.queue else None


class Stop(Exception):
    """SIGTERM: raised from the handler so that a select() with no timeout returns."""


def on_term(*_):
    raise Stop


def main(argv):
    args = parse_args(argv)
    line = Line(open_tun(args.name), args.delay_ms / 1000.0, args.loss, args.seed)
    signal.signal(signal.SIGTERM, on_term)
    with open(args.ready, "w") as f:
        f.write(str(os.getpid()))
    try:
        while True:
            readable, _, _ = select.select([line.fd], [], [], line.wait_s(time.monotonic()))
            if readable:
                line.take(time.monotonic())
            line.release(time.monotonic())
    except Stop:
        pass
    print(f"wire {args.name}: {line.forwarded} packets forwarded, {line.dropped} dropped", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
