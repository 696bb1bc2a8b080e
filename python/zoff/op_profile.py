"""zoff.OpProfile: where a span of training steps goes, op by op (zoff train --profile's table)."""
import time

from . import _zoff


class OpProfile:
    """Per-op CPU time of the ops this thread runs (and LibTorch's intra-op threads) between
    start() and stop(): calls, self and total ms per step, % of the steps' wall time.

        with zoff.OpProfile(steps=5) as prof:
            for _ in range(5):
                train_step()
        prof.write("profile.txt")

    It records into memory made before it starts. torch.profiler (both of LibTorch 1.13's
    profilers) allocates its events on the heap while the steps run, which on the CPU
    fragments the heap the step's tensors come from: each profiled step then takes fresh
    pages and runs slower (measured: a gpt small step 2.5x slower, RSS 5x), so its table
    describes a different step. One profile per process at a time.
    """

    def __init__(self, steps=1):
        if not isinstance(steps, int) or steps < 1:
            raise ValueError(f"zoff.OpProfile: steps = {steps!r}: must be an int >= 1")
        self.steps = steps
        self._native = _zoff.OpProfile()
        self._started = None

    def start(self):
        self._native.start()
        self._started = time.perf_counter()

    def stop(self):
        if self._started is None:
            raise RuntimeError("zoff.OpProfile.stop: not started")
        wall = time.perf_counter() - self._started
        self._started = None
        self._native.stop(self.steps, wall)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def ops(self):
        """Each op's name, calls, self_us and total_us over all steps, and other_thread (it ran
        on another thread than the one that started the profile), largest self time first."""
        return self._native.ops()

    def table(self, top=40):
        """The text table of zoff train --profile: the `top` ops by self time, then zoff's
        own scopes (zoff::...) however small, then what the listed ops leave of the step."""
        return self._native.table(int(top))

    def write(self, path, top=40):
        """Writes table(top) to `path` (a temporary name, then renamed), as zoff train
        --profile does."""
        self._native.write(str(path), int(top))
