"""What each rank times of a DistributedDataParallel step: its forward and its gradient all-reduce (from inside
DDP's communication hook). Its optimizer steps are the Watcher's (`StepRecord.optimizer_s`, timed by the doctor's
instrumentation: doctor/observe/parts.py), which the rank's record takes (ranks/context.py: rank_record).

`RankTimer.install()` times `DistributedDataParallel.forward` calls and wraps DDP's communication hook: a hook the
user registers (`register_comm_hook`) is wrapped as it is registered; a DDP module with none gets, at its first
forward, DDP's own reference hook (`default_hooks.allreduce_hook`: divide by the world size, then all_reduce; DDP
documents it as giving the same results as no hook), wrapped. The wrapper notes, per bucket, when DDP called the
hook (the bucket's gradients are ready), when its future completed (the all-reduce is done on this rank: that
includes waiting for the slowest rank to arrive) and the bucket's bytes. Works with gloo and NCCL alike: the future
completes on the backend's thread. Registering a Python hook where DDP had its built-in C++ all-reduce costs a
Python call per bucket (a few buckets a step: 25 MiB each by default).

Per step (`rank_step`), from what began inside the step's wall time:
- `forward_s`: the DDP forward calls (with the record's `optimizer_s`, the rest of the step's compute is the loss,
  the backward pass and zero_grad: "backward" in the ranks' table);
- `collective_s`: the union of the buckets' [call, completion] intervals, the time any all-reduce was in flight;
- `exposed_s`: from the last bucket's call (backward has produced its last gradients) to the last completion,
  the time the step waited on communication that backward did not hide; on a rank that others wait for it is
  small, on the ranks that wait it holds the wait;
- `bytes`: the bytes all-reduced.

Limits: collectives outside DDP's gradient hook (an explicit all_reduce of a metric, FSDP, a parameter server)
are not timed; the interval is measured on the host, so on CUDA it ends when the stream's work is done and the
future's callback runs.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from gpufeed.doctor.patching import Patch


@dataclass(frozen=True)
class BucketTiming:
    called_s: float  # time.perf_counter() when DDP called the hook
    completed_s: float  # when the bucket's future completed
    nbytes: int


@dataclass(frozen=True)
class RankStep:
    collective_s: float
    exposed_s: float
    bytes: int
    buckets: int
    forward_s: float = 0.0


class RankTimer:
    """Collects a `BucketTiming` per all-reduced bucket, and (start, end) perf_counter pairs of DDP forwards, while
    installed."""

    def __init__(self) -> None:
        self.buckets: list[BucketTiming] = []
        self.forwards: list[tuple[float, float]] = []
        self.modules = 0  # DDP modules whose hook was wrapped
        self._lock = threading.Lock()
        self._patches: list[Patch] = []

    def install(self) -> None:
        from torch.nn.parallel import DistributedDataParallel

        timer = self

        def make_register(original):
            def register_comm_hook(module, state, hook):
                module._gpufeed_timed = True
                timer.modules += 1
                return original(module, state, timer.wrap(hook))
            return register_comm_hook

        def make_forward(original):
            def forward(module, *args, **kwargs):
                if not getattr(module, "_gpufeed_timed", False) and not getattr(module, "_comm_hooks", None):
                    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

                    module.register_comm_hook(module.process_group, allreduce_hook)
                started = time.perf_counter()
                try:
                    return original(module, *args, **kwargs)
                finally:
                    timer._add_to(timer.forwards, (started, time.perf_counter()))
            return forward

        self._patches = [Patch(DistributedDataParallel, "register_comm_hook", make_register),
                         Patch(DistributedDataParallel, "forward", make_forward)]

    def remove(self) -> None:
        for patch in reversed(self._patches):
            patch.restore()
        self._patches = []

    def wrap(self, hook):
        timer = self

        def gpufeed_timed_hook(state, bucket):  # no annotations: DDP compares them with the classes themselves
            buffer = bucket.buffer()
            nbytes = buffer.numel() * buffer.element_size()
            called = time.perf_counter()
            future = hook(state, bucket)

            def completed(done):
                timer._add(BucketTiming(called, time.perf_counter(), nbytes))
                return done.value()

            return future.then(completed)

        gpufeed_timed_hook.__qualname__ = getattr(hook, "__qualname__", "hook")  # DDP's logger names the hook
        return gpufeed_timed_hook

    def _add(self, timing: BucketTiming) -> None:
        self._add_to(self.buckets, timing)

    def _add_to(self, series: list, item) -> None:
        with self._lock:
            series.append(item)

    def step(self, start_s: float, wall_s: float) -> RankStep:
        """The step that began at perf_counter time `start_s` and lasted `wall_s`."""
        with self._lock:
            buckets, forwards = list(self.buckets), list(self.forwards)
        return rank_step(buckets, forwards, start_s, wall_s)


def _within(spans: list[tuple[float, float]], start_s: float, wall_s: float) -> float:
    return sum(end - begin for begin, end in spans if start_s <= begin < start_s + wall_s)


def rank_step(buckets: list[BucketTiming], forwards: list[tuple[float, float]], start_s: float,
              wall_s: float) -> RankStep:
    """One step of a rank: the buckets DDP called and the forwards that began within [start_s, start_s + wall_s),
    on the perf_counter clock (a StepRecord's start_s plus the watcher's `started_s`)."""
    forward = _within(forwards, start_s, wall_s)
    inside = sorted((b for b in buckets if start_s <= b.called_s < start_s + wall_s), key=lambda b: b.called_s)
    if not inside:
        return RankStep(0.0, 0.0, 0, 0, forward)
    union, reach = 0.0, None
    for bucket in inside:  # sorted by call: extend or start an interval
        if reach is None or bucket.called_s > reach:
            union += bucket.completed_s - bucket.called_s
            reach = bucket.completed_s
        elif bucket.completed_s > reach:
            union += bucket.completed_s - reach
            reach = bucket.completed_s
    exposed = max(0.0, max(b.completed_s for b in inside) - inside[-1].called_s)
    return RankStep(union, exposed, sum(b.nbytes for b in inside), len(inside), forward)
