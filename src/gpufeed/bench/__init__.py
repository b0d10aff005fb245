"""gpufeed bench: CPU against GPU on this machine, each figure against the hardware's peak (hardware/peak.py).

Modules:
- kernels.py: matrix products over a sweep of sizes and one convolution, per device and precision, TF32 switched
  per measurement (hardware/tf32.py)
- steps.py: whole training steps (train/step.py) per model, device and precision; short trainings per precision
- link.py: host-device copies, pageable and pinned, against the PCIe link's theoretical rate (hardware/pcie.py)
- budget.py: the time budget of --quick, per measurement and per device for its steps and its kernels
- busy.py: whether other processes, steal or spread made the figures unreliable
- gpu_answer.py: with no GPU benchmarked, the planner's estimate of the CNN step on the catalog's GPUs
- results.py: BenchResult and its parts (the peaks are hardware/peak.py's Peak), frozen dataclasses with units in
  the names
- summary.py: the summary sentences
- run.py: run_bench, everything above as one BenchResult
"""
