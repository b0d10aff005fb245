"""worker_memory: the DataLoader workers' private memory grows as they read the Dataset's Python objects
("copy-on-read"), and is projected to the end of the epoch against the host's available RAM.

Read from `Observation.worker_memory` (observe/worker_memory.py: each worker's USS through the watch, the Dataset's
attributes that hold many Python objects and their bytes). The baseline is the first reading after every worker
handed over a batch (their start-up is over), not the fork.

The projection (`project`): reading a Python object writes its reference count, so a worker copies the page that
holds it; reads are shuffled, so pages are dirtied at random and the growth slows as the epoch goes on. With the
Dataset's objects occupying D bytes (their sum, `dataset_objects`) and about s samples' objects on a page, a
worker that has read k of the N samples since the baseline has copied D * (1 - (1 - k/N)^s): s is fitted to the
growth seen (s = ln(1 - g/D) / ln(1 - k/N)), and the end of the epoch is k = N / workers (each worker reads its
share of the batches). A reading counts the batches the loop has taken; the workers have also read some of the
prefetch_factor batches each is handed ahead of it (all of them when the loop is the slower, about one when they
are), so half of those are counted as read (IN_FLIGHT_READ). Counting none undercounted the reads at the baseline,
early in the epoch, by more than half, and the projection came out up to a tenth high, the more the further ahead
the workers ran, which the load on the machine decides. A worker never copies more than D. Without an attribute
holding many objects there is no bound, so the projection is a straight line from the growth per batch, said as
an upper estimate. Garbage collection passes dirty pages in jumps (a full collection writes every tracked
object's header): gc.freeze() before the loader starts keeps the parent's objects out of it.

Found when a worker's private memory grew by at least MIN_GROWTH_BYTES over the watch. Severity from what the
workers on the node (workers x ranks on the node) would still add by the end of the epoch over the host's
available RAM: high at RUNS_OUT (it runs out: the evidence says at which batch), medium from HALF, else low.
It claims no step time (shares.py) and is never the verdict; when it projects the memory running out, the
verdict's line says so, and any other fix that advises more workers says what each costs (`annotate`).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpufeed.doctor.findings.grading import new_finding
from gpufeed.doctor.findings.kind import Evidence, Judged, Kind
from gpufeed.doctor.findings.report import Finding
from gpufeed.units import bytes_text

if TYPE_CHECKING:
    from gpufeed.doctor.notes import Notes
    from gpufeed.doctor.observation import Observation, WorkerMemoryReading

# gpufeed's choice: growth under 8 MiB a worker over the watch is a worker's own allocations settling.
MIN_GROWTH_BYTES = 8 * 2**20
CURVE_POINTS = 20  # the page's projection curve
RUNS_OUT, HALF = 1.0, 0.5  # of the available RAM the workers would still add by the epoch's end
# gpufeed's choice: the share of the batches prefetched ahead of the loop that a worker has read at a reading
# (between none and all, as the module docstring says): half, so that it is off by half of them at most.
IN_FLIGHT_READ = 0.5


@dataclass(frozen=True)
class Projection:
    start_bytes: int  # one worker's private memory at the baseline (median over the workers)
    now_bytes: int  # at the last reading
    growth_per_1000_batches: float  # since the baseline, per 1,000 batches
    projected_worker_bytes: int  # one worker at the end of the epoch
    projected_total_bytes: int  # every worker on the node (workers x ranks on the node)
    additional_bytes: int  # what the workers on the node would still add by the end of the epoch
    how: str  # how the projection was made, in words
    runs_out_at_batch: int | None  # the epoch's batch at which they would fill the available RAM; None: never
    curve: tuple[tuple[int, int], ...] = ()  # (batch, one worker's projected bytes) from the last reading to the end


def _baseline(reading: WorkerMemoryReading) -> int | None:
    """The index of the first reading after every worker handed over a batch."""
    return next((index for index, sample in enumerate(reading.samples) if sample[1] > reading.workers), None)


def project(reading: WorkerMemoryReading) -> Projection | None:
    """The projection to the end of the epoch (the module docstring); None without two readings past the
    baseline or without the epoch's length."""
    base = _baseline(reading)
    if base is None or len(reading.samples) - base < 2 or not reading.epoch_batches or not reading.batch_size:
        return None
    first, last = reading.samples[base], reading.samples[-1]
    start = int(statistics.median(first[3]))
    now = int(statistics.median(last[3]))
    batches = last[1] - first[1]
    if batches <= 0:
        return None
    growth = max(0, now - start)
    workers, nodes = reading.workers, reading.workers * reading.ranks_on_node
    per_1000 = 1000.0 * growth / batches
    left = max(0, reading.epoch_batches - last[1])
    objects = sum(attribute.bytes for attribute in reading.attributes)
    samples = reading.dataset_length or reading.epoch_batches * reading.batch_size
    # samples each worker has read by a batch count (each worker reads its share of the batches, and part of those
    # it was handed ahead of the loop), and the share of the objects' pages a worker has copied after `reads`
    # random reads with `s` samples' objects a page
    ahead = IN_FLIGHT_READ * (reading.prefetch_factor or 0) * workers

    def reads_by(batch: int) -> float:
        return min(samples, min(batch + ahead, reading.epoch_batches) * reading.batch_size / workers)

    def copied(reads: float, s: float) -> float:
        return 1.0 - (1.0 - min(reads, samples) / samples) ** s

    k_base, k_now, end_k = reads_by(first[1]), reads_by(last[1]), samples / workers
    at_batch = None
    marks = [int(last[1] + (reading.epoch_batches - last[1]) * step / CURVE_POINTS) for step in
             range(CURVE_POINTS + 1)] if reading.epoch_batches > last[1] else [last[1]]
    if objects > 0 and 0 < growth < objects * (1.0 - copied(k_base, 1.0)) and k_now < samples:
        s = _fit(growth / objects, k_base, k_now, copied)
        projected = now + int(objects * (copied(end_k, s) - copied(k_now, s)))
        curve = tuple((mark, now + int(objects * (copied(reads_by(mark), s) - copied(k_now, s)))) for mark in marks)
        how = (f"copy-on-read: {bytes_text(objects, 'MiB', 0)} of the Dataset's Python objects, of which a worker "
               f"copies the pages it reads at random: {bytes_text(growth, 'MiB', 1)} from its read {k_base:,.0f} to "
               f"its read "
               f"{k_now:,.0f} of {end_k:,.0f} fits {s:.1f} samples a page, so it holds "
               f"{copied(end_k, s):.0%} of them by the epoch's end (never more than all "
               f"{bytes_text(objects, 'MiB', 0)}); a straight line would say "
               f"{bytes_text(start + per_1000 * (reading.epoch_batches - first[1]) / 1000, 'MiB', 0)}")
        available = reading.available_bytes
        if available is not None:
            target = copied(k_now, s) + available / nodes / objects  # the copied share at which the RAM is full
            if target < 1.0:
                reads = samples * (1.0 - (1.0 - target) ** (1.0 / s))
                batch = int(reads * workers / reading.batch_size - ahead)
                at_batch = batch if batch <= reading.epoch_batches else None
    elif objects > 0 and growth >= objects:
        projected = now
        curve = tuple((mark, now) for mark in marks)
        how = (f"copy-on-read: the workers have copied all {bytes_text(objects, 'MiB', 0)} of the Dataset's Python "
               f"objects already; they grow no further this epoch")
    else:
        projected = now + int(per_1000 * left / 1000)
        curve = tuple((mark, now + int(per_1000 * (mark - last[1]) / 1000)) for mark in marks)
        how = ("a straight line from the growth per batch (an upper estimate: no attribute of the Dataset holds "
               "many Python objects to bound it)")
        if reading.available_bytes is not None and per_1000 > 0:
            batch = int(last[1] + 1000.0 * reading.available_bytes / nodes / per_1000)
            at_batch = batch if batch <= reading.epoch_batches else None
    additional = max(0, projected - now) * nodes
    return Projection(start, now, per_1000, projected, projected * nodes, additional, how, at_batch, curve)


def _fit(grown: float, k_base: float, k_now: float, copied) -> float:
    """The samples a page, s, at which copied(k_now, s) - copied(k_base, s) is `grown` (a share of the objects).
    The difference a^s - b^s (a = 1 - k_base/N, b = 1 - k_now/N) rises with s up to
    s* = ln(ln b / ln a) / ln(a / b), then falls: bisection on a log scale below s*; a growth above its peak
    (more than the objects explain) takes s*."""
    samples_a = copied(k_base, 1.0)  # 1 - a
    samples_b = copied(k_now, 1.0)  # 1 - b
    a, b = 1.0 - samples_a, 1.0 - samples_b
    if a >= 1.0:  # nothing read at the baseline: the difference rises with s for ever
        peak = 1e6
    else:
        peak = min(1e6, math.log(math.log(b) / math.log(a)) / math.log(a / b))
    if copied(k_now, peak) - copied(k_base, peak) <= grown:
        return peak
    low, high = 0.01, peak
    for _ in range(100):
        middle = math.sqrt(low * high)
        if copied(k_now, middle) - copied(k_base, middle) < grown:
            low = middle
        else:
            high = middle
    return math.sqrt(low * high)


@dataclass(frozen=True)
class WorkerMemoryEvidence(Evidence):
    """The evidence read beside the detection: by `annotate`, the verdict's line and the doctor's page."""

    projected_worker_bytes: int | None
    projected_total_bytes: int | None
    projection: str | None
    runs_out_at_batch: int | None


class WorkerMemory(Kind):
    NAME = "worker_memory"
    MEANING = "the DataLoader workers' memory grows as they read the Dataset's Python objects (copy-on-read)"
    CLAIMS_TIME = False  # shares.py: memory, not time
    RECOMMEND_AT = None
    RECOMMEND_SOURCE = "no level: memory, not time, so it claims no share and is never the verdict"
    FIGURES = ("projected_worker_bytes", "projected_total_bytes", "share_of_available")

    def detect(self, seen: Observation, notes: Notes, judged: Judged) -> Finding | None:
        reading = seen.worker_memory
        if reading is None:
            if seen.loader.workers:
                notes.unmeasured("worker memory: the DataLoader's workers were not followed (its iterator was not "
                                 "seen)")
            return None
        projection = project(reading)
        if projection is None:
            notes.unmeasured("worker memory: too few readings past the workers' start-up, or the epoch's length is not "
                             "known, to project it")
            return None
        if projection.now_bytes - projection.start_bytes < MIN_GROWTH_BYTES:
            return None
        available = reading.available_bytes
        fraction = projection.additional_bytes / available if available else None
        grade = "low" if fraction is None else "high" if fraction >= RUNS_OUT else "medium" if fraction >= HALF \
            else "low"
        base = _baseline(reading)
        evidence = {"workers": reading.workers, "ranks_on_node": reading.ranks_on_node,
                    "worker_start_bytes": list(reading.samples[base][3]),
                    "worker_now_bytes": list(reading.samples[-1][3]),
                    "main_now_bytes": reading.samples[-1][2],
                    "growth_per_1000_batches_bytes": projection.growth_per_1000_batches,
                    "projected_worker_bytes": projection.projected_worker_bytes,
                    "projected_total_bytes": projection.projected_total_bytes,
                    "additional_bytes": projection.additional_bytes, "available_bytes": available,
                    "share_of_available": fraction, "runs_out_at_batch": projection.runs_out_at_batch,
                    "epoch_batches": reading.epoch_batches, "projection": projection.how,
                    "dataset_objects": [{"attribute": a.name, "type": a.type, "length": a.length, "bytes": a.bytes}
                                        for a in reading.attributes]}
        return new_finding(self.NAME, grade, 0.0, evidence, fix(evidence),
                           "medium" if len(reading.samples) >= 8 else "low")

    def annotate(self, findings: list[Finding]) -> list[Finding]:
        """When it projects the RAM running out, every other fix that advises more workers says what each costs in
        RAM."""
        memory = next((f for f in findings if f.kind == self.NAME and f.severity == "high"), None)
        if memory is None:
            return findings
        worker_bytes = WorkerMemoryEvidence.of(memory.evidence).projected_worker_bytes
        cost = (f" Each worker costs about {bytes_text(worker_bytes, 'GiB', 2, grouped=False)} of RAM by the "
                f"epoch's end here, and the RAM runs out already (worker_memory): fix that first.")
        return [dataclasses.replace(f, fix=f.fix + cost) if f.kind != self.NAME and "num_workers" in f.fix + f.snippet
                else f for f in findings]

    def timeline(self, seen: Observation) -> dict | None:
        """What the page draws: each reading (batches so far, the main process's and each worker's private bytes)
        and the projection's curve for one worker to the end of the epoch; None without readings."""
        reading = seen.worker_memory
        if reading is None or not reading.samples:
            return None
        projection = project(reading)
        return {"readings": [{"time_s": t, "batches": b, "main_bytes": main, "worker_bytes": list(workers)}
                             for t, b, main, workers in reading.samples],
                "projection": [list(point) for point in projection.curve] if projection else [],
                "epoch_batches": reading.epoch_batches, "available_bytes": reading.available_bytes,
                "workers_on_node": reading.workers * reading.ranks_on_node}

    def violations(self, finding: Finding, findings: list[Finding]) -> list[str]:
        """While it projects the RAM running out, no other fix advises workers without their cost."""
        if finding.severity != "high":
            return []
        return [f"{other.kind} advises workers without their RAM cost while the RAM runs out" for other in findings
                if other.kind != self.NAME and "num_workers" in other.fix + other.snippet and "RAM" not in other.fix]

    def verdict_addendum(self, finding: dict) -> str:
        """Memory, not time, so never the verdict: but when the run will not finish, the verdict's line says so."""
        if finding["severity"] != "high":
            return ""
        batch = WorkerMemoryEvidence.of(finding["evidence"]).runs_out_at_batch
        return ("; and the host's RAM runs out" + (f" at about batch {batch:,}" if batch is not None else
                                                   " before the epoch ends") + " (worker_memory)")


def fix(evidence: dict) -> tuple[str, str]:
    worker, total = (bytes_text(evidence[key], "GiB", 2, grouped=False)
                     for key in ("projected_worker_bytes", "projected_total_bytes"))
    held = evidence["dataset_objects"]
    named = (f"the Dataset's {held[0]['attribute']} ({held[0]['type']} of {held[0]['length']:,} Python objects)"
             if held else "the Dataset's Python objects")
    when = (f" At this rate the host's RAM runs out at about batch {evidence['runs_out_at_batch']:,} of the "
            f"{evidence['epoch_batches']:,} in the epoch." if evidence.get("runs_out_at_batch") is not None else "")
    text = (f"Each of the {evidence['workers']} DataLoader workers copies {named} page by page as it reads them "
            f"(reading a Python object writes its reference count, so fork's shared pages become private): "
            f"about {worker} per worker by the end of the epoch, {total} for the "
            f"{evidence['workers'] * evidence['ranks_on_node']} workers on this node.{when} Hold the data in numpy "
            f"arrays or tensors (one object each, not one per sample), or in a packed file (`gpufeed pack`, read "
            f"with gpufeed.Feed); call gc.freeze() before the loader starts, so garbage collection does not write "
            f"to the parent's objects in the workers; as a stopgap, fewer workers (each saves about "
            f"{worker}).")
    snippet = ("import gc, numpy\n"
               "# in the Dataset's __init__: one array per field instead of a list of Python objects\n"
               "self.paths = numpy.array(paths, dtype=numpy.bytes_)  # or numpy.str_\n"
               "self.labels = numpy.array(labels, dtype=numpy.int64)\n"
               "# before the DataLoader starts its workers\n"
               "gc.freeze()")
    return text, snippet
