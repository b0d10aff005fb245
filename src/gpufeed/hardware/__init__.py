"""What this machine is. A reading that cannot be taken is NA(reason), never an exception and never a zero.

Modules:
- na.py: NA, a missing reading with its reason, and attempt() that turns a failing read into one
- cpu.py: the CPU's model, cores, SIMD flags and clocks
- probe.py: MachineInfo, the CPU, RAM, the data's disk, accelerators with their PCIe link, software versions
- devices.py: a device name from the user ('auto', 'cpu', 'cuda:1', 'mps') to a torch.device that exists
- nvml.py: NVIDIA queries through NVML that return a value or NA
- gpm.py: NVML GPM metrics (Hopper and newer), SM activity, SM occupancy and tensor activity
- catalog.py: lookups in gpus.json, a sourced, dated table of GPU peaks, memory, power and prices
"""
