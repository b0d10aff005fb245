"""Shared verdict thresholds: one figure for a judgement that more than one command makes."""

from __future__ import annotations

# The device busy share (CUDA-event time on the device over wall time; NVML utilization / 100 where no events were
# timed) at or above which a training loop counts as busy enough: the feed keeps up, and what remains is the
# model's own arithmetic. gpufeed's choice, first the doctor's compute_bound rule: even a well-fed loop spends
# part of each step off the device (the optimizer's launches, Python between kernels, the loader hand-off), so a
# fully fed loop rarely reads above 0.9, and below 0.8 the idle time is worth a diagnosis. Used by `gpufeed
# doctor` (rules.compute_bound) and by the verdict of `gpufeed train` (train.events.verdict).
DEVICE_BUSY_ENOUGH = 0.8

# Optimizer steps an epoch below which a run has too few to learn from (270 images at the default batch of 256
# is one step an epoch, and a few epochs end at chance). gpufeed's round figure. `gpufeed train` lowers a batch
# size the user did not set to reach it (train.setup.fit_batch_to_data), and its verdict says so rather than
# blaming the hardware (train.events.verdict).
MIN_STEPS_PER_EPOCH = 20
