"""`gpufeed doctor --try`: re-run the script with each leading finding's fix and measure what it gains. Above
observe/ (each run is watched) and findings/ (the plan reads the report's findings).

- changes.py: Changes and Experiment; the changes that test a fix (replayed batches, DataLoader and DDP arguments,
  autocast) and their checks that the change took
- async_item.py: the async_item experiment for sync_stall (CUDA), .item() without the wait
- cut_padding.py: the cut_padding experiment for padding_waste, every training batch cut to its longest row
- plan.py: each kind's declared experiments (findings/kind.py) built into changes, plan_experiments
- runs.py: run_once (this process's Runner), an experiment's pairs in ABBA order (runs/pairs.py), the median gain,
  its range and whether it is real (measure/difference.py), the findings' gains
"""
