"""gpufeed bench: CPU against GPU on this machine, each figure against the hardware's peak.

Modules:
- peak.py: peak dense FLOP/s per precision, a CPU's from its instruction sets, cores and clock, a GPU's from the catalog
- kernels.py: matrix products over a sweep of sizes and one convolution, per device and precision
- tf32.py: TF32 switched on or off for one measurement, and restored after
- steps.py: whole training steps (train/step.py) per model, device and precision; short trainings per precision
- link.py: host-device copies, pageable and pinned, against the PCIe link's theoretical rate
- results.py: BenchResult and its parts, frozen dataclasses with units in the names
- run.py: run_bench, everything above as one BenchResult with its summary sentences
"""
