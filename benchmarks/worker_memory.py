"""worker_memory's projection against the memory the workers actually reach at the end of an epoch (issue 20).

The copy-on-read Dataset of tests/doctor/scripts/copy_on_read.py (a list of (path, label) tuples, SAMPLES of them),
2 forked workers, shuffled, batches of 256:
1. the doctor watches it with its default watched steps (gpufeed doctor's: 5 warm-up, 50 watched, the profile);
   its worker_memory finding gives `projected_worker_bytes`;
2. the same loop runs one whole epoch with nothing watching it, and each worker's USS (smaps_rollup) is read when
   the last batch arrives (the workers are still alive then).
Prints, per round, the projection, the end of the epoch's figure (the median over the workers) and their ratio,
and the straight line from the watched growth for comparison; then the median and spread of the ratios.

    python benchmarks/worker_memory.py [--samples 3000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "doctor" / "scripts" / "copy_on_read.py"


def projected(samples: int) -> dict:
    from gpufeed.doctor.findings.diagnose import diagnose
    from gpufeed.doctor.observe.inject import run_script
    from gpufeed.doctor.observe.watch import Watcher

    watcher = Watcher()  # the doctor's defaults
    run_script(str(SCRIPT), [str(samples)], False, watcher, timeout_s=120)
    report = diagnose(watcher.observe())
    found = {f.kind: f for f in report.findings}.get("worker_memory")
    if found is None:
        raise SystemExit("no worker_memory finding: " + "; ".join(report.unmeasured))
    return found.evidence


def actual(samples: int) -> int:
    """The median worker's USS when the epoch's last batch arrives."""
    import runpy

    from gpufeed.doctor.observe.worker_memory import private_bytes

    module = runpy.run_path(str(SCRIPT), run_name="copy_on_read")
    dataset = module["Paths"](samples)
    loader = torch.utils.data.DataLoader(dataset, batch_size=256, shuffle=True, num_workers=2,
                                         multiprocessing_context="fork")
    iterator = iter(loader)
    for index, _ in enumerate(iterator):
        if index == len(iterator) - 1:
            return int(statistics.median(private_bytes(worker) for worker in iterator._workers))
    raise RuntimeError("the epoch had no batch")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"# {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, Python "
          f"{sys.version.split()[0]}, torch {torch.__version__}; {args.samples:,} samples, 2 forked workers")
    ratios = []
    for round_ in range(args.rounds):
        evidence = projected(args.samples)
        reached = actual(args.samples)
        ratio = evidence["projected_worker_bytes"] / reached
        ratios.append(ratio)
        line = evidence["projection"].split("a straight line would say ")[-1]
        print(f"round {round_ + 1}: projected {evidence['projected_worker_bytes'] / 2**20:,.0f} MiB a worker, "
              f"reached {reached / 2**20:,.0f} MiB at the epoch's end: {ratio:.3f}x (straight line: {line})",
              flush=True)
    print(f"projected / reached: median {statistics.median(ratios):.3f}, range {min(ratios):.3f}-{max(ratios):.3f} "
          f"over {len(ratios)} rounds")


if __name__ == "__main__":
    main()
