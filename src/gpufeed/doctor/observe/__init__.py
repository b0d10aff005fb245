"""Watching a run: the script run in this process, the hooks patched into torch, and the Watcher that turns their
events into step records and, at the end, the one Observation (doctor/observation.py) the findings read. Imports
observation.py, notes.py, patching.py and frameworks/; never findings/ (the caller diagnoses the Observation).

- inject.py: run_script, someone else's script run in this process as python would, with a watchdog
- hooks.py: Instrumentation, the hooks patched into torch (DataLoader, optimizer, module hooks, CUDA copies/syncs)
- parts.py: StepParts, the host time of the step's model forward and of its optimizer steps, into the step, and
  the start of its first training forward, which ends the loop's own input work (no DataLoader: loop_input_s)
- loader_split.py: inside the DataLoader, each batch's __getitem__, collate, hand-over and pinning, timed where they run
- watch.py: Watcher, events in and one StepRecord per step out; the step clock; observe(), the Observation
- clock.py: what one step holds (batches, samples, accumulation) and the notes that say so
- profile.py: torch.profiler over a few steps after the watched ones: operators, kernels, device busy time
- flops.py: the FLOPs of the last warm-up step (FlopCounterMode) by operator and precision, the device's peak
- probe.py: the small-batch probe, the fixed cost of a step at a small batch, on the user's own model
- tokens.py: the token positions and real (not padding) tokens of a batch of token ids, counted on the host
- padding.py: padding in batches of token ids: its span and rows' lengths, where it is made, a batch cut to its
  longest row, and the padding trial (forward+backward as it came and cut) after the watch
- scheduler.py: the training thread's wait for a core (Linux's schedstat), read at each step boundary
- worker_memory.py: the DataLoader workers' private memory through the watch, and what the Dataset holds to copy
"""
