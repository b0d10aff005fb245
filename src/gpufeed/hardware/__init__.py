"""What this machine is, and the machine facts bench, plan, train and the doctor share. A reading that cannot be
taken is NA(reason), never an exception and never a zero. Nothing here imports the packages above it.

Modules:
- na.py: NA, a missing reading with its reason, and attempt() that turns a failing read into one
- cpu.py: the CPU's model, cores, SIMD flags and clocks
- probe.py: MachineInfo, the CPU, RAM, the data's disk, accelerators with their PCIe link, software versions
- devices.py: a device name from the user ('auto', 'cpu', 'cuda:1', 'mps') to a torch.device that exists, and
  device_label, the device string results carry ('cpu', 'cuda:0')
- nvml.py: NVIDIA queries through NVML that return a value or NA
- gpm.py: NVML GPM metrics (Hopper and newer), SM activity, SM occupancy and tensor activity
- catalog.py: lookups in gpus.json, a sourced, dated table of GPU peaks, memory, power and prices
- cpu_table.py: lookups in cpus.json, a sourced, dated table of FLOPs per cycle per core by CPU microarchitecture
- precisions.py: the precisions gpufeed computes in (fp64, fp32, tf32, bf16, fp16) and each one's dtypes, TF32
  and loss scaling: the table the peaks, bench's kernels and the training step share
- peak.py: Peak, the dense FLOP/s per precision: a CPU's from cpus.json (else an upper bound from its instruction
  sets), cores and clock; a GPU's from the catalog
- tf32.py: TF32 switched on or off for cuBLAS matmuls and cuDNN convolutions, and restored after
- pcie.py: PCIe lane rates, a link's theoretical GB/s by generation and width, and the narrow-link threshold
"""
