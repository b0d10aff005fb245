"""gpufeed plan: the device memory, compute, host and GPUs a training needs, before buying or renting one.

Modules:
- fake_model.py: a model with no data behind its weights, on the meta device and then with fake weights
- live_bytes.py: LiveBytes, a dispatch mode that counts live storage bytes and their peak by phase
- memory.py: device memory of one training step, itemized, traced on fake tensors; the largest batch that fits
- compute.py: FLOPs per step, hours at a model-FLOPs utilisation, and that utilisation measured on a GPU here
- system.py: host RAM, CPU cores, disk, power supply and the PCIe link around the GPUs
- rank.py: the catalog's GPUs ranked for the run, fit, hours, cost to buy and rent, energy
- run.py: PlanRequest, make_plan and plan_json; a user's model factory loaded from its file
- check.py: --check, the planned step run here and its peak memory and time compared with the plan
"""
