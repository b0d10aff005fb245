"""A tiny training step after the loop's thread has slept, against the same step back to back, in one run.

    python benchmarks/thread_wake.py [--steps 40] [--repeats 5] [--sleep-ms 20]

Why: on the 2-vCPU VMs of docs/development.md, `tests/doctor/scripts/input_bound.py` (a Dataset that sleeps 5 ms a
sample, no workers) spends 7-10 ms in a Linear(16, 4) step whose forward and backward the doctor's probe times at
0.04 ms, and two DataLoader workers take its backward from about 9 ms to 1 ms (docs/compare.md). This measures the
effect without the doctor: the step (forward, backward, SGD step of Linear(16, 4) on 4 samples) timed right after
the previous one (the baseline), after `time.sleep`, after a `queue.get` that a thread feeds at the same period
(as a loader's hand-over), and after the same sleep while two other processes sleep 5 ms at a time (as workers
do); each with torch's intra-op threads as set (`torch.get_num_threads()`) and with one thread. Each condition's
median over `--steps` steps, then the median and range of those over `--repeats` rounds, conditions interleaved
within a round. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import multiprocessing
import platform
import queue
import statistics
import threading
import time

import torch
from torch import nn

from gpufeed.hardware.cpu import probe_cpu


def _sleeper(stop) -> None:
    while not stop.is_set():
        time.sleep(0.005)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sleep-ms", type=float, default=20.0)
    args = parser.parse_args()
    pause = args.sleep_ms / 1000.0
    torch.manual_seed(0)
    model = nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs, labels = torch.randn(4, 16), torch.tensor([0, 1, 2, 3])

    def step() -> float:
        started = time.perf_counter()
        loss = nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return time.perf_counter() - started

    fed: queue.Queue = queue.Queue()

    def feeder() -> None:
        while True:
            time.sleep(pause)
            fed.put(1)

    threading.Thread(target=feeder, daemon=True).start()
    stop = multiprocessing.Event()
    sleepers = [multiprocessing.Process(target=_sleeper, args=(stop,), daemon=True) for _ in range(2)]

    def beside_sleepers() -> None:
        if not sleepers[0].is_alive():
            for process in sleepers:
                process.start()
        time.sleep(pause)

    def drained_get() -> None:
        while not fed.empty():  # the steps of other conditions let items pile up: wait for a fresh one
            fed.get_nowait()
        fed.get()

    conditions = {"back to back (baseline)": lambda: None,
                  f"after time.sleep({args.sleep_ms:g} ms)": lambda: time.sleep(pause),
                  f"after queue.get, fed every {args.sleep_ms:g} ms": drained_get,
                  "after the sleep, 2 processes waking every 5 ms": beside_sleepers}
    default_threads = torch.get_num_threads()
    results: dict[tuple[int, str], list[float]] = {}
    for threads in sorted({default_threads, 1}, reverse=True):
        torch.set_num_threads(threads)
        for _ in range(args.repeats):
            for name, wait in conditions.items():
                times = []
                for _ in range(args.steps):
                    wait()
                    times.append(step())
                results.setdefault((threads, name), []).append(statistics.median(times))
    stop.set()
    cpu = probe_cpu()
    print(f"{cpu.model} (family {cpu.family} model {cpu.model_number}), {cpu.usable_cores} usable cores, Python "
          f"{platform.python_version()}, torch {torch.__version__}, {args.repeats} rounds of {args.steps} steps")
    for threads in sorted({default_threads, 1}, reverse=True):
        baseline = statistics.median(results[(threads, "back to back (baseline)")])
        for name in conditions:
            medians = results[(threads, name)]
            middle = statistics.median(medians)
            print(f"  {threads} intra-op thread{'s' if threads > 1 else ''}, {name}: {middle * 1e3:.2f} ms "
                  f"(rounds {min(medians) * 1e3:.2f}-{max(medians) * 1e3:.2f}), {middle / baseline:.1f}x the baseline")


if __name__ == "__main__":
    main()
