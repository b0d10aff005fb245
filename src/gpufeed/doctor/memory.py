"""memory_pressure: the device's memory is nearly full or its caching allocator retried, or the host's RAM is
nearly full (the background samples' largest reading)."""

from __future__ import annotations

from gpufeed.doctor import fixes
from gpufeed.doctor.evidence import Watch, finding
from gpufeed.doctor.report import Finding

# gpufeed's choice: peak memory at 90% of capacity leaves no room to raise the batch.
MEMORY_PEAK_FRACTION = 0.90
# Prometheus node_exporter mixin, NodeMemoryHighUtilization: host memory used (total - available) above 90%.
HOST_RAM_FRACTION = 0.90


def _host_ram(watch: Watch) -> dict | None:
    """The host RAM evidence: the fullest reading of the background samples, and how many were at
    HOST_RAM_FRACTION or above; None (with a note) when no sample read the RAM."""
    readings = [(s.ram_used_bytes, s.ram_total_bytes) for s in watch.samples
                if s.ram_used_bytes is not None and s.ram_total_bytes]
    if not readings:
        watch.note("host RAM: no background sample read it")
        return None
    used, total = max(readings, key=lambda reading: reading[0] / reading[1])
    return {"host_ram_used_fraction": used / total, "host_ram_used_gib": used / 2**30,
            "host_ram_total_gib": total / 2**30, "host_samples": len(readings),
            "host_samples_full": sum(1 for u, t in readings if u >= HOST_RAM_FRACTION * t)}


def memory_pressure(watch: Watch) -> Finding | None:
    peak, capacity = watch.get("memory_peak_bytes"), watch.get("memory_capacity_bytes")
    retries = watch.get("allocator_retries")
    fraction = peak / capacity if peak is not None and capacity else None
    if watch.on_gpu and (fraction is None or retries is None):
        watch.note("device memory: the peak, the capacity or the allocator's retries were not read")
    host = _host_ram(watch)
    host_full = host is not None and host["host_ram_used_fraction"] >= HOST_RAM_FRACTION
    device_full = fraction is not None and fraction >= MEMORY_PEAK_FRACTION
    if not device_full and not retries and not host_full:
        return None
    evidence = {"peak_gib": peak / 2**30 if peak is not None else None,
                "capacity_gib": capacity / 2**30 if capacity else None, "peak_fraction": fraction,
                "allocator_retries": retries, **(host or {})}
    # Retries flush the allocator's cache and synchronize: a slowdown. A full memory alone only blocks a larger
    # batch (or, on the host, risks swapping and the OOM killer). Neither's time is measured here, so the finding
    # claims no share.
    return finding("memory_pressure", "medium" if retries else "low", 0.0, evidence,
                   fixes.memory_pressure(device_full or bool(retries), host_full), "high")
