"""The doctor on several ranks: every rank runs the script under its own instrumentation, and rank 0 writes the
one report of the job.

Launching: `gpufeed doctor --nproc-per-node N SCRIPT` runs torch.distributed.run (PyTorch's own launcher, the
code behind torchrun) in its process with `--standalone --nproc-per-node N -m gpufeed doctor ... SCRIPT`
(`launcher_arguments`); a user's own `torchrun ... -m gpufeed doctor SCRIPT`, one node or several, is the same
thing. A rank knows it is one from torchrun's environment (`RankContext.from_environment`: WORLD_SIZE > 1, RANK,
MASTER_ADDR/MASTER_PORT).

Every rank watches the same steps (the same --warmup, --steps and --profile-steps), so every rank stops after
the same optimizer step and none is left inside a collective that its peers will never join.

Gathering (`Exchange`): through the c10d TCPStore torchrun keeps for the job at MASTER_ADDR:MASTER_PORT (the
agent's store; it works across nodes), under keys of this job (`gpufeed-doctor/<run id>/`). Each rank sets its
record (`rank_record`: JSON, never pickle: its watched steps with their forward, all-reduce and optimizer step,
timing.py, and what went wrong); rank 0 waits for all of them up to the doctor's --timeout, names the ranks
that did not answer, writes the report, and then sets "done", which the other ranks wait for (also bounded)
before they exit.

A rank that crashes or hangs (`RankGuard`, a thread in every rank): a rank whose script raised sets its record and
a "failed" key, and waits for rank 0's "done" before it exits, so that torchrun does not stop rank 0 first. On
rank 0, a peer's failure, or this rank's own lack of progress for --timeout + GRACE_S (the script watchdog of
observe/inject.py could not interrupt it: the main thread is inside C, most likely a collective waiting for a rank that
is gone), makes the guard end the rank from its own thread: rank 0 gathers what there is, writes the report
naming the rank and its error, sets "done" and exits with status 1; another rank sets its record and exits once
rank 0 is done. The command line ends the process with os._exit (after flushing): its main thread cannot be
unblocked. ABANDON_LIMIT_S bounds that path too, so the command ends within its watchdog and nothing is left
running.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpufeed.doctor.observation import Observation, Ranks, RankSummary
from gpufeed.doctor.ranks.timing import RankTimer
from gpufeed.errors import GpufeedError
from gpufeed.torchrun import launch

# gpufeed's choice: after a peer failed, rank 0's own loop gets this long to come back (it may have finished its
# steps) before the guard ends it from outside.
PEER_GRACE_S = 3.0
# gpufeed's choice: past the script watchdog's --timeout, how long the guard waits for the main thread to return.
GRACE_S = 5.0
# gpufeed's choice: the most the guard's own ending (gather, report, "done") may take before the process exits.
ABANDON_LIMIT_S = 60.0
POLL_S = 0.1


@dataclass(frozen=True)
class RankContext:
    rank: int
    world_size: int
    local_rank: int
    host: str
    port: int
    run_id: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_environment(cls, environ=None) -> RankContext | None:
        """This process's rank in a torchrun job, or None for one process (WORLD_SIZE unset or 1)."""
        job = launch(environ)
        if not job.distributed:
            return None
        return cls(job.rank, job.world_size, job.local_rank, job.master_addr, job.master_port, job.run_id)


def launcher_arguments(words: list[str], nproc: int) -> list[str]:
    """torch.distributed.run's arguments that run `gpufeed doctor WORDS` as `nproc` ranks on this machine;
    `words` are the doctor's own (its options, SCRIPT, ARGS), without --nproc-per-node."""
    return ["--standalone", f"--nproc-per-node={nproc}", "-m", "gpufeed", "doctor", *words]


# --- one rank's record --------------------------------------------------------------------------------------


def rank_record(rank: int, records, started_s: float, timer: RankTimer, problem: str | None,
                device: str) -> dict:
    """What a rank sends: each watched step's wall time and data wait, its forward and all-reduce (timing.py),
    its optimizer steps (the record's `optimizer_s`, doctor/observe/parts.py: the instrumentation times them from
    before the first step, so it is never None here), and why the watch is incomplete (None: it completed).
    JSON-able."""
    steps = []
    for record in records:
        timed = timer.step(started_s + record.start_s, record.wall_s)
        steps.append({"index": record.index, "start_s": record.start_s, "wall_s": record.wall_s,
                      "data_wait_s": record.data_wait_s, **dataclasses.asdict(timed),
                      "optimizer_s": record.optimizer_s})
    return {"rank": rank, "device": device, "problem": problem, "steps": steps}


def summarize(record: dict) -> RankSummary:
    """A rank's record as means per watched step, in milliseconds."""
    steps = record["steps"]

    def mean(key: str) -> float:
        return 1000.0 * statistics.fmean(step[key] for step in steps) if steps else 0.0

    step, wait, exposed = mean("wall_s"), mean("data_wait_s"), mean("exposed_s")
    compute = max(0.0, step - wait - exposed)
    forward = mean("forward_s") if steps and "forward_s" in steps[0] else 0.0
    optimizer = mean("optimizer_s") if steps and "optimizer_s" in steps[0] else 0.0
    return RankSummary(rank=int(record["rank"]), steps=len(steps), step_ms=step, data_wait_ms=wait,
                       compute_ms=compute, collective_ms=mean("collective_s"), exposed_ms=exposed,
                       bytes_per_step=statistics.fmean(s["bytes"] for s in steps) if steps else 0.0,
                       problem=record.get("problem"), forward_ms=forward, optimizer_ms=optimizer,
                       backward_ms=max(0.0, compute - forward - optimizer))


def slowest_shares(records: list[dict]) -> dict[int, float]:
    """For each rank, the share of the steps every rank watched (by position) in which its own work (wall less
    the all-reduce waited for) was the most."""
    watched = [r for r in records if r["steps"]]
    count = min((len(r["steps"]) for r in watched), default=0)
    wins = {r["rank"]: 0 for r in watched}
    for position in range(count):
        slowest = max(watched, key=lambda r: r["steps"][position]["wall_s"] - r["steps"][position]["exposed_s"])
        wins[slowest["rank"]] += 1
    return {rank: won / count for rank, won in wins.items()} if count else {}


def communication_floor(records: list[dict]) -> tuple[float | None, float | None]:
    """(exposed, in flight) in ms of the all-reduce itself: per step (by position) the rank that waited least after
    backward, its wait and its time in flight, averaged over the steps every rank watched. Ranks take turns
    arriving last, so a rank's mean includes the steps where it waited for the other: the per-step least does
    not."""
    watched = [r for r in records if r["steps"]]
    count = min((len(r["steps"]) for r in watched), default=0)
    if len(watched) < 2 or count == 0:
        return None, None
    least = [min((r["steps"][position] for r in watched), key=lambda step: step["exposed_s"])
             for position in range(count)]
    return (1000.0 * statistics.fmean(step["exposed_s"] for step in least),
            1000.0 * statistics.fmean(step["collective_s"] for step in least))


def with_ranks(seen: Observation, world_size: int, records: list[dict], missing: list[str]) -> Observation:
    """Rank 0's observation with every gathered rank (a rank that watched no step is a `missing` line)."""
    shares = slowest_shares(records)
    floor_exposed, floor_in_flight = communication_floor(records)
    summaries = tuple(dataclasses.replace(summarize(r), slowest_share=shares.get(r["rank"]))
                      for r in sorted(records, key=lambda r: r["rank"]) if r["steps"])
    missing = missing + [f"rank {r['rank']}: no watched step ({r.get('problem') or 'none recorded'})"
                         for r in records if not r["steps"]]
    return dataclasses.replace(seen, ranks=Ranks(world_size, summaries, tuple(missing), floor_exposed,
                                                 floor_in_flight))


def rank_problems(records: list[dict], missing: list[str]) -> list[str]:
    """'rank R: problem' for every rank whose watch is incomplete, then the ranks that did not answer."""
    return [f"rank {r['rank']}: {r['problem']}" for r in sorted(records, key=lambda r: r["rank"])
            if r.get("problem")] + list(missing)


# --- the exchange through torchrun's store ------------------------------------------------------------------


class Exchange:
    """Records, failures and "done" through the job's c10d TCPStore (see the module docstring)."""

    def __init__(self, context: RankContext, timeout_s: float):
        from torch.distributed import TCPStore

        self.context = context
        self.prefix = f"gpufeed-doctor/{context.run_id}/"
        try:
            self.store = TCPStore(context.host, context.port, is_master=False,
                                  timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False)
        except Exception as error:  # noqa: BLE001 - torch raises several kinds; one line says which address
            raise GpufeedError(f"rank {context.rank}: cannot reach torchrun's store at {context.host}:"
                               f"{context.port} ({type(error).__name__}: {error}); launch with torchrun or "
                               f"gpufeed doctor --nproc-per-node N") from None

    def _key(self, name: str) -> str:
        return self.prefix + name

    def _has(self, name: str) -> bool:
        return self.store.check([self._key(name)])

    def publish(self, record: dict) -> None:
        self.store.set(self._key(f"rank/{record['rank']}"), json.dumps(record))

    def fail(self, rank: int, problem: str) -> None:
        self.store.set(self._key(f"failed/{rank}"), problem)

    def failed_peer(self) -> tuple[int, str] | None:
        for rank in range(self.context.world_size):
            if rank != self.context.rank and self._has(f"failed/{rank}"):
                return rank, self.store.get(self._key(f"failed/{rank}")).decode()
        return None

    def gather(self, timeout_s: float) -> tuple[list[dict], list[str]]:
        """Every rank's record, waiting up to `timeout_s` for the last; the ranks that did not answer as
        'rank R: why' lines."""
        deadline = time.monotonic() + timeout_s
        names = [f"rank/{rank}" for rank in range(self.context.world_size)]
        while not all(self._has(name) for name in names) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        records, missing = [], []
        for rank, name in enumerate(names):
            if self._has(name):
                records.append(json.loads(self.store.get(self._key(name))))
            else:
                missing.append(f"rank {rank}: sent no record within {timeout_s:g} s (it is still running, or "
                               f"ended without a word: killed, or its node is gone)")
        return records, missing

    def finish(self) -> None:
        self.store.set(self._key("done"), "1")

    def wait_finished(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self._has("done"):
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)
        return True


# --- the guard: a rank that crashed or hangs ---------------------------------------------------------------


class RankGuard:
    """Watches, from its own thread, for a failed peer and for this rank's own lack of progress (`progress()`
    counts step boundaries); then calls `abandon(reason)` once, which must end the process, and, should it not
    have ended it within ABANDON_LIMIT_S, `end()` (the command line's: exit with status 1). The main thread
    `claim()`s the ending when its run returns: whoever claims first does it, the other does nothing."""

    def __init__(self, context: RankContext, exchange: Exchange, progress: Callable[[], int], stall_s: float,
                 abandon: Callable[[str], None], end: Callable[[], None]):
        self.context, self.exchange, self.progress, self.stall_s = context, exchange, progress, stall_s
        self.abandon, self.end = abandon, end
        self._claimed, self._lock, self._stop = False, threading.Lock(), threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpufeed-doctor-rank-guard", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def claim(self) -> bool:
        with self._lock:
            if self._claimed:
                return False
            self._claimed = True
            self._stop.set()
            return True

    def _run(self) -> None:
        seen, moved_s, failed_s = -1, time.monotonic(), None
        while not self._stop.wait(POLL_S * 5):
            now = time.monotonic()
            if self.progress() != seen:
                seen, moved_s = self.progress(), now
            peer = self.exchange.failed_peer()
            if peer is not None and failed_s is None:
                failed_s = now
            if peer is not None and now - failed_s >= PEER_GRACE_S:
                reason = f"stopped: rank {peer[0]} failed ({peer[1]})"
            elif now - moved_s >= self.stall_s:
                reason = (f"no step ended for {now - moved_s:.0f} s and the script could not be interrupted (most "
                          f"likely blocked in a collective)")
            else:
                continue
            if self.claim():
                backstop = threading.Timer(ABANDON_LIMIT_S, self.end)
                backstop.daemon = True
                backstop.start()
                self.abandon(reason)
            return
