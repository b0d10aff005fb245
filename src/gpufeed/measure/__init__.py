"""Timing, sampling and thresholds that train, bench, plan and the doctor share: one of each mechanism.

Modules:
- timing.py: time on a device, CUDA events or the wall clock: time_call and Timing, seconds per call after a warm-up,
  median and spread; and the timers a running loop keeps, DeviceBusyTimer (CUDA events around each step),
  Stopwatch (time waiting for data) and event_pairs_seconds
- sampler.py: the background sampler, NVML readings of one GPU and the host's CPU, RAM and disk reads
- steps.py: StepRecord, where a watched step's time went, and HostSample, one background reading
- thresholds.py: DEVICE_BUSY_ENOUGH, the busy share that train's verdict and the doctor both judge by
- quiet.py: holds back kineto's profiler start and stop lines on standard error
- difference.py: whether a difference between two runs is real: the block bootstrap of two saved runs' steps, the
  range of pairs made in ABBA order, MIN_CHANGE and the one rule (compare, A/B, --try)
- transformer_flops.py: a dense transformer's training FLOPs per token, 6N + 12·L·h·s (PaLM appendix B), and what it
  reads of a model: N and N_t (multiplied_parameters), L and h from its transformers config (attention_shape)
"""
