"""Pairs of runs, BASE and NEW, in ABBA order: the one loop that `--try` (in this process or as torchrun jobs) and
the A/B mode (subprocesses) run their comparisons on; the judgement of the pairs is measure/difference.py's.

Order: BASE NEW, NEW BASE, BASE NEW, ... (`abba_order`), so a machine that slows or speeds up steadily favours
neither side; the A/B mode first runs one baseline that is not counted (it warms the page cache and the imports),
while `--try` follows its diagnosis run. A pair is checked once both its runs are done (`check`: an experiment's
test that its change took, against the pair's baseline). The first failing run or check ends the pairs with its
reason; the runs done so far are kept."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpufeed.doctor.runs.runner import Run
from gpufeed.measure.difference import abba_order


@dataclass(frozen=True)
class Pairs:
    """The pairs run, (BASE, NEW) each, in pair order; `problem`, why they stopped early (None: all ran), and
    `failed`, the side whose run or check stopped them ("base", "new" or "check")."""

    runs: tuple[tuple[Run, Run], ...]
    problem: str | None = None
    failed: str | None = None


def planned_runs(pairs: int, warm_up: bool = False) -> list[tuple[int, str]]:
    """(pair, side) in the order run; the uncounted warm-up baseline, when asked, is pair -1."""
    if pairs < 1:
        raise ValueError(f"pairs must be at least 1, got {pairs}")
    return ([(-1, "base")] if warm_up else []) + abba_order(pairs)


def run_pairs(run: Callable[[str], Run], pairs: int, *, warm_up: bool = False,
              check: Callable[[Run, Run], str | None] | None = None,
              on_run: Callable[[int, int, str], None] | None = None) -> Pairs:
    """`pairs` pairs of `run("base")` and `run("new")` in ABBA order (after an uncounted baseline with `warm_up`).
    A run whose `problem` is set ends the pairs, and so does `check(base, new)` returning a reason. `on_run(done,
    total, label)` is told before each run."""
    planned = planned_runs(pairs, warm_up)
    done: dict[int, dict[str, Run]] = {}
    complete: list[tuple[Run, Run]] = []
    for number, (pair, side) in enumerate(planned):
        if on_run is not None:
            on_run(number, len(planned), "warm-up (baseline, not counted)" if pair < 0 else
                   f"pair {pair + 1}: {side.upper()}")
        result = run(side)
        if result.problem is not None:
            return Pairs(tuple(complete), result.problem, side)
        if pair < 0:
            continue
        done.setdefault(pair, {})[side] = result
        if len(done[pair]) == 2:
            base, new = done[pair]["base"], done[pair]["new"]
            problem = check(base, new) if check is not None else None
            if problem is not None:
                return Pairs(tuple(complete), problem, "check")
            complete.append((base, new))
    return Pairs(tuple(complete))
