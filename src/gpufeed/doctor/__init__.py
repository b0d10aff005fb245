"""gpufeed doctor and gpufeed.watch: watch a training loop, name its bottleneck with evidence, and measure the fix.

The flow: inject.py runs the script with hooks.py's instrumentation feeding a Watcher (watch.py); the Watcher's
`observe()` makes one Observation (observation.py); diagnose.py runs every finding module over it into a Report
(report.py); with --try, experiments.py and trials.py re-run the script with each leading fix and measure it.

Running and watching:
- inject.py: run_script, someone else's script run in this process as python would, with a watchdog
- hooks.py: Instrumentation, the hooks patched into torch (DataLoader, optimizer, module hooks, CUDA copies/syncs)
- loader_split.py: inside the DataLoader, each batch's __getitem__, collate, hand-over and pinning, timed where they run
- patching.py: Patch (reversible), AfterImport, the first tensor of a batch, the user's line that called a library
- frameworks.py: the training framework and where the training loader was built, recorded at construction (Setup)
- watch.py: Watcher, events in and one StepRecord per step out; the step clock; observe(), the Observation
- clock.py: what one step holds (batches, samples, accumulation) and the notes that say so
- profile.py: torch.profiler over a few steps after the watched ones: operators, kernels, device busy time
- flops.py: the FLOPs of the last warm-up step (FlopCounterMode) by operator and precision, the device's peak
- wrapper.py: watch() and the WatchedLoop it returns, an iterable wrapper and a context manager
Judging:
- observation.py: Observation, the typed, frozen record of a run the findings read, with its parts and Totals
- findings/: one module per finding kind (detection, fix, --try experiments, meaning); FINDINGS, KINDS
- grading.py: the shared thresholds, severity and confidence, the host-bound gate, new_finding
- framework_words.py: the fixes in the framework's words (TrainingArguments, train_dataloader(), accelerate)
- stalls.py: slow-step outliers and the beat they fall on (periodic_stall's detection)
- diagnose.py: an Observation in, a Report out: the findings, the primary kind, the verdict, the throughputs
- report.py: Report, Verdict, Finding, Gain, Note (about the run or not measured), SEVERITIES; the JSON
Verifying (--try):
- experiments.py: the changes that test a fix (replayed batches, DataLoader arguments, autocast) and their checks;
  plan_experiments asks each finding's module which to run
- async_item.py: the async_item experiment for sync_stall (CUDA), .item() without the wait
- trials.py: pairs of a fresh baseline and the changed run, the median gain and its range
"""
