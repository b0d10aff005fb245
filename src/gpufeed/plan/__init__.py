"""gpufeed plan: the device memory, compute, host and GPUs a training needs, before buying or renting one.

Modules:
- fake_model.py: a model with no data behind its weights, on the meta device and then with fake weights; a user's
  factory loaded from its file
- live_bytes.py: LiveBytes, a dispatch mode that counts live storage bytes and their peak by phase
- memory.py: device memory of one training step, itemized, traced on fake tensors; the largest batch that fits
- traffic.py: FLOPs and bytes read and written by each operator of the step, traced on fake tensors
- roofline.py: a step's time on a catalog GPU, per operator the longer of FLOPs at its peak and bytes at its
  bandwidth, at fitted efficiencies with a band
- published.py: NVIDIA's published single-GPU throughput the efficiencies are fitted to and checked against
- compute.py: FLOPs per step, steps, hours from the roofline, and the efficiencies calibrated on a GPU here
- hosts.py: the system a GPU is sold in (SXM/OAM on 4- or 8-GPU boards, PCIe cards 1-8) and a server's power
- system.py: host RAM, CPU cores, disk, power supply and the PCIe link of that system
- rank.py: the catalog's GPUs ranked for the run: precision per card, fit, hours, rent per hour and per job,
  buy as sold, energy
- run.py: PlanRequest, make_plan and plan_json
- check.py: --check, the planned step run here and its peak memory and time compared with the plan
- input_cost.py: bytes a sample is stored in, and samples one core stages per second through the real Feed
- kernel_scratch.py: a stated upper bound on the scratch a CPU matrix-product kernel allocates inside itself
- optimizers.py: the optimizers a plan names, transformers' Adafactor and bitsandbytes' 8-bit AdamW state included

Folders:
- language/: language models (the catalog and a model built on the meta device, QLoRA's base, sdpa as CUDA holds
  it), their plan per GPU and --check
"""
