"""The finding kinds, one module each, named after its kind (docs/design.md, "The doctor's vocabulary"):
communication.py, compute_bound.py, cpu_saturated.py, host_to_device.py, input_bound.py, launch_overhead.py,
memory_pressure.py, padding_waste.py, periodic_stall.py, precision.py, small_batch.py, straggler.py, sync_stall.py,
worker_memory.py.

Each holds one subclass of `Kind` (findings/kind.py), the contract generic code reads, and the kind's fix; it
builds on the modules the kinds share, one folder up (report.py, grading.py, kind.py, experiments.py, stalls.py),
and imports no other kind. findings/__init__.py registers them, in the vocabulary's order.
"""
