"""The finding kinds, one module each, named after its kind (docs/design.md, "The doctor's vocabulary"):
communication.py, compute_bound.py, cpu_saturated.py, host_to_device.py, input_bound.py, launch_overhead.py,
memory_pressure.py, periodic_stall.py, precision.py, small_batch.py, straggler.py, sync_stall.py, worker_memory.py.

Each builds on the modules the kinds share, one folder up (findings/: report.py, grading.py, stalls.py); none
imports another kind. `FINDINGS` (findings/__init__.py) lists them in the vocabulary's order.
"""
