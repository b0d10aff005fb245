"""gpufeed bench: CPU against GPU on this machine, each figure against the hardware's peak.

Modules:
- peak.py: peak dense FLOP/s per precision, a CPU's from its microarchitecture (hardware/cpus.json; else an upper
  bound from its instruction sets), cores and clock, a GPU's from the catalog
- kernels.py: matrix products over a sweep of sizes and one convolution, per device and precision
- tf32.py: TF32 switched on or off for one measurement, and restored after
- steps.py: whole training steps (train/step.py) per model, device and precision; short trainings per precision
- link.py: host-device copies, pageable and pinned, against the PCIe link's theoretical rate
- budget.py: the time budget of --quick, per measurement and per device for its steps and its kernels
- busy.py: whether other processes, steal or spread made the figures unreliable
- gpu_answer.py: with no GPU benchmarked, the planner's estimate of the CNN step on the catalog's GPUs
- results.py: BenchResult and its parts, frozen dataclasses with units in the names
- summary.py: the summary sentences
- run.py: run_bench, everything above as one BenchResult
"""
