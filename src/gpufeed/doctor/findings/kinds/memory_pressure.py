"""memory_pressure: the device's memory is nearly full or its caching allocator retried, or the host's RAM is
nearly full (the background samples' fullest reading).

Retries flush the allocator's cache and synchronize: a slowdown (medium). A full memory alone only blocks a
larger batch (or, on the host, risks swapping and the OOM killer): low. Neither's time is measured here, so the
finding claims no share. No --try experiment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufeed.doctor.findings.grading import new_finding
from gpufeed.doctor.findings.kind import Judged, Kind
from gpufeed.doctor.findings.report import Finding
from gpufeed.doctor.notes import Notes

if TYPE_CHECKING:
    from gpufeed.doctor.observation import Observation

# gpufeed's choice: peak memory at 90% of capacity leaves no room to raise the batch.
MEMORY_PEAK_FRACTION = 0.90
# Prometheus node_exporter mixin, NodeMemoryHighUtilization: host memory used (total - available) above 90%.
HOST_RAM_FRACTION = 0.90


def _host_ram(seen: Observation, notes: Notes) -> dict | None:
    """The host RAM evidence: the fullest reading of the background samples, and how many were at
    HOST_RAM_FRACTION or above; None (with a note) when no sample read the RAM."""
    readings = [(s.ram_used_bytes, s.ram_total_bytes) for s in seen.samples
                if s.ram_used_bytes is not None and s.ram_total_bytes]
    if not readings:
        notes.unmeasured("host RAM: no background sample read it")
        return None
    used, total = max(readings, key=lambda reading: reading[0] / reading[1])
    return {"host_ram_used_fraction": used / total, "host_ram_used_gib": used / 2**30,
            "host_ram_total_gib": total / 2**30, "host_samples": len(readings),
            "host_samples_full": sum(1 for u, t in readings if u >= HOST_RAM_FRACTION * t)}


class MemoryPressure(Kind):
    NAME = "memory_pressure"
    MEANING = "device memory near its limit, allocator retries, or host RAM nearly full"
    CLAIMS_TIME = False  # shares.py: its time is not measured, so it claims no share
    RECOMMEND_AT = None
    RECOMMEND_SOURCE = "no level: its time is not measured, so it claims no share and is never the verdict"
    FIGURES = ("peak_fraction", "allocator_retries")

    def detect(self, seen: Observation, notes: Notes, judged: Judged) -> Finding | None:
        memory = seen.memory
        peak, capacity, retries = memory.peak_bytes, memory.capacity_bytes, memory.allocator_retries
        fraction = peak / capacity if peak is not None and capacity else None
        if seen.on_gpu and (fraction is None or retries is None):
            notes.unmeasured("device memory: the peak, the capacity or the allocator's retries were not read")
        host = _host_ram(seen, notes)
        host_full = host is not None and host["host_ram_used_fraction"] >= HOST_RAM_FRACTION
        device_full = fraction is not None and fraction >= MEMORY_PEAK_FRACTION
        if not device_full and not retries and not host_full:
            return None
        evidence = {"peak_gib": peak / 2**30 if peak is not None else None,
                    "capacity_gib": capacity / 2**30 if capacity else None, "peak_fraction": fraction,
                    "allocator_retries": retries, **(host or {})}
        remedy = fix(device_full or bool(retries), host_full)
        return new_finding(self.NAME, "medium" if retries else "low", 0.0, evidence, remedy, "high")


def fix(device: bool = True, host: bool = False) -> tuple[str, str]:
    """`device`: the device's memory is nearly full or its allocator retried; `host`: the host's RAM is."""
    fix, snippet = "", ""
    if device:
        fix = ("Device memory is nearly full, or the caching allocator had to free its cache and retry, which "
               "synchronizes the device. Lower the activations: bf16 autocast, activation checkpointing, a smaller "
               "batch; let the allocator grow segments instead of fragmenting.")
        snippet = ("# before Python starts:\n"
                   "#   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py\n"
                   "from torch.utils.checkpoint import checkpoint\n"
                   "hidden = checkpoint(block, hidden, use_reentrant=False)  # recompute in backward, do not store")
    if host:
        fix += (" " if fix else "") + (
            "Host RAM is nearly full now: the system will swap or the OOM killer will end the run. Find what holds "
            "it (other processes, a dataset loaded whole into memory, several ranks on one node) and lower it; "
            "whether the DataLoader workers' own memory grows is worker_memory's finding.")
    return fix, snippet

