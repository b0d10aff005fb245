"""Time budgets for `gpufeed bench --quick`: a limit per measurement, and one for each device's training steps and
for its kernels, so that a quick bench stays under a minute on 2 busy cores. The full bench has no budget.

The training steps run first, within QUICK_STEPS_S per device; the kernels follow, within QUICK_KERNELS_S per
device (with a GPU the quick bench takes longer: each device gets its windows). A budgeted measurement times its
first call (the first warm-up). Over the measurement's allowance it stops there (`OverBudget`); otherwise it gets
the remaining warm-ups and as many timed repeats as the first call's time says fit, at least 2 (so a measurement
may overrun its allowance by about one call). Once a window is spent, later measurements in it are not started.
Both are named in the bench's `unmeasured` list.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from gpufeed.measure.timing import Timing, time_call

QUICK_MEASUREMENT_S = 8.0  # one matmul size, one convolution, one training step (warm-up included)
QUICK_STEPS_S = 15.0  # a device's training steps (they come first: the summary's answer rests on the CNN step)
QUICK_KERNELS_S = 20.0  # a device's matrix products and convolutions; python and torch start in ~5 s besides


class OverBudget(Exception):
    def __init__(self, first_call_s: float, allowance_s: float):
        super().__init__(f"skipped: its first call took {first_call_s:.2f} s, over the {allowance_s:.1f} s a "
                         f"measurement of a quick bench may take (run without --quick to measure it)")


@dataclass(frozen=True)
class Budget:
    per_measurement_s: float | None  # None: no limit
    deadline: float | None  # time.monotonic() after which no measurement starts; None: none
    window: str = ""  # what the deadline is for, in words: "the quick bench's 15 s for training steps on cpu"

    @classmethod
    def quick(cls, seconds: float, what: str) -> Budget:
        """The quick bench's budget for `what` (a device's training steps or kernels), from now."""
        return cls(QUICK_MEASUREMENT_S, time.monotonic() + seconds, f"the quick bench's {seconds:.0f} s for {what}")

    def spent(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def spent_reason(self) -> str:
        return (f"skipped: {self.window} were spent (a busy machine runs everything slower; run without --quick to "
                f"measure it)")

    def allowance_s(self) -> float | None:
        """Seconds the next measurement may take: the per-measurement limit, or what is left, if less."""
        if self.per_measurement_s is None:
            return None
        left = self.per_measurement_s if self.deadline is None else self.deadline - time.monotonic()
        return max(min(self.per_measurement_s, left), 0.0)


NO_BUDGET = Budget(None, None)


def budgeted_timing(call: Callable[[], Any], device: torch.device | str, budget: Budget = NO_BUDGET,
                    warmup: int = 3, repeats: int = 10, min_seconds: float = 0.0) -> Timing:
    """`measure.timing.time_call` within `budget.allowance_s()` (see the module docstring)."""
    allowance = budget.allowance_s()
    if allowance is None:
        return time_call(call, device, warmup=warmup, repeats=repeats, min_seconds=min_seconds)
    first_s = time_call(call, device, warmup=0, repeats=1).median_s
    if first_s > allowance:
        raise OverBudget(first_s, allowance)
    fit = int((allowance - first_s) / first_s) if first_s > 0 else warmup + repeats
    more_warmup = max(min(warmup - 1, fit - 2), 0)
    runs = max(min(repeats, fit - more_warmup), min(2, repeats))
    return time_call(call, device, warmup=more_warmup, repeats=runs,
                     min_seconds=min_seconds if first_s * runs < allowance else 0.0)
