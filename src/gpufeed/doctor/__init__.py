"""gpufeed doctor and gpufeed.watch: watch a training loop, name its bottleneck with evidence, and measure the fix.

The flow, by stage: observe/ runs the script (or the loop `watch()` wraps) with hooks feeding a Watcher, whose
`observe()` makes one Observation (observation.py); findings/ turns an Observation into a Report (findings/diagnose.py);
trials/ (--try) re-runs the script with each leading fix and measures it; ranks/ does all of that on every rank of
a torchrun job. The command line (cli/doctor*.py) only parses flags, prints and says the exit status.

Arrows (each may import only what it lists; nothing below imports what is above it):
- ranks/ -> trials/, findings/, observation.py, notes.py, patching.py
- trials/ -> observe/, findings/, frameworks/, notes.py, patching.py
- wrapper.py -> observe/, findings/
- observe/ -> observation.py, frameworks/, notes.py, patching.py (never findings/)
- findings/ -> observation.py, frameworks/, notes.py (never observe/; no torch)
- observation.py -> frameworks/, notes.py
- frameworks/ -> notes.py, patching.py
- notes.py, patching.py: nothing of the doctor's

Here:
- observation.py: Observation, the typed, frozen record of a run the findings read, with its parts and Totals
  (the profiled steps and the step's FLOPs included)
- notes.py: Note (about the run, or not measured), Notes, unmeasured: the lines every stage adds to a report
- patching.py: Patch (reversible), AfterImport, the first tensor of a batch, the user's line that called a library
- wrapper.py: watch() and the WatchedLoop it returns (an iterable wrapper and a context manager); its report()
  is diagnose(observe())
Folders (each __init__.py is the map of its own):
- frameworks/: the training framework and the training loader's site, and the fixes in the framework's words
- observe/: the in-process run, the hooks, the loader split, the step clock and contents, profile, FLOPs, Watcher
- findings/: one module per finding kind, grading, stalls, diagnose, and the Report types
- trials/: --try: the changes, async_item, the plan of experiments, the runs and their gains
- ranks/: several ranks: the rank context and exchange, the rank timing, the torchrun jobs
"""
