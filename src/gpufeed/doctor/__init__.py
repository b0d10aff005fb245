"""gpufeed doctor and gpufeed.watch: watch a training loop, name its bottleneck with evidence, and measure the fix.

Modules:
- inject.py: run_script, someone else's script run in this process as python would, with a watchdog
- hooks.py: the instrumentation patched into torch (DataLoader, optimizer, module hooks, CUDA copies and syncs)
- patching.py: a reversible patch, the first tensor of a batch, the user's line that called a library
- watch.py: Watcher, events in and one StepRecord per step out; the step clock; the profiled window after
- wrapper.py: Watch, what gpufeed.watch() returns, an iterable wrapper and a context manager
- clock.py: what one step holds (batches, samples, accumulation) and the lines that say so
- profile.py: torch.profiler over a few steps after the watched ones, operators, kernels and device busy time
- evidence.py: what the rules read (Watch, totals), severity and confidence grading, throughputs
- rules.py: records and samples in, a Report out; the rules of most kinds and the primary kind
- launch.py: the launch_overhead rule, from the profiled window
- memory.py: the memory_pressure rule, device memory and host RAM
- occupancy.py: NVML utilization against GPM SM activity, an underfilled device as small_batch
- stalls.py: slow-step outliers and their beat, the periodic_stall and straggler rules
- fixes.py: each finding's remedy in words and as code
- report.py: Report, Verdict, Finding, Gain, the kinds and severities, and the report's JSON
- experiments.py: --try, the change that tests each finding's fix and the check that it took effect
- async_item.py: the async_item experiment for sync_stall (CUDA), .item() without the wait
- trials.py: --try runs, pairs of a fresh baseline and the changed run, the median gain and its range
"""
