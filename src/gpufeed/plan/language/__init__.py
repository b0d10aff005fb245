"""The plan of a language model: its memory per GPU, traced from its own modeling code, sharded or not, what fits,
how fast and at what cost.

Modules:
- models.json: the catalog of language-model architectures, configuration facts with their sources
- model.py: --model resolved to a language model and built on the meta device with its method (LoRA, QLoRA's base,
  activation checkpointing); each row read as one unpadded sequence while tracing
- nf4.py: QLoRA's 4-bit NF4 base weights by bitsandbytes' layout
- fused_attention.py: sdpa's memory as CUDA's fused kernels hold it, for a CUDA plan traced on the CPU
- sharding.py: the state sharded over GPUs (ddp, ZeRO 1-3, FSDP2, HSDP, offload): bytes per GPU, on the host and
  sent per step
- throughput.py: tokens per second per GPU: the traced FLOPs at a fitted efficiency, communication over the link
- host.py: the node around the GPUs the job uses: RAM, checkpoint loading, disk, cores, power supply
- run.py: LanguagePlanRequest, make_language_plan and language_plan_json: memory and what fits per GPU
- check.py: --check for a language model, the model given real weights in the plan's dtypes
"""
