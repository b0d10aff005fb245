"""train's automatic precision on a CPU with bf16 (train/precision.py's probe): interleaved rounds judged by
measure/difference.py until the speedup is clear of the 10% margin, on fake step timers with a hand-set clock."""

import itertools

import pytest
import torch

from gpufeed.train.precision import PROBE_MAX_ROUNDS, PROBE_MIN_ROUNDS, probe_bf16, resolve_precision


def timers(fp32_s: float, bf16_s: float, load=lambda call: 1.0, jitter=(1.0, 1.03, 0.98, 1.01)):
    """Two fake step timers sharing one machine: call n (counted over both) is slowed by load(n) and a repeating
    jitter; each returns its precision's step time."""
    calls = itertools.count()
    noise = itertools.cycle(jitter)

    def make(seconds: float):
        def timed() -> float:
            return seconds * load(next(calls)) * next(noise)
        return timed

    return make(fp32_s), make(bf16_s)


def test_a_clear_speedup_is_taken_after_the_first_rounds():
    probe = probe_bf16(*timers(1.0, 0.5))
    assert probe.outcome == "bf16" and len(probe.bf16_s) == PROBE_MIN_ROUNDS
    assert probe.speedup == pytest.approx(2.0, rel=0.05) and probe.speedup_low > 1.1


def test_bf16_slower_keeps_fp32_with_its_figures():
    probe = probe_bf16(*timers(0.6, 1.0))
    assert probe.outcome == "fp32" and probe.speedup == pytest.approx(0.6, rel=0.05)
    assert "kept fp32" in probe.words() and "0.6" in probe.words()


def test_a_busy_moment_lands_on_both_precisions_alike():
    """The machine is 3x slower for the first 8 calls (the warm-ups and the first three rounds): timed one after the
    other, fp32 would take all of it and bf16 none; interleaved, the ratio holds."""
    probe = probe_bf16(*timers(1.0, 0.6, load=lambda call: 3.0 if call < 8 else 1.0))
    assert probe.outcome == "bf16"
    assert probe.speedup == pytest.approx(1 / 0.6, rel=0.1)


def test_a_difference_at_the_margin_is_not_told_apart_and_keeps_fp32():
    # bf16 1.1x, the margin itself, with 8% noise: the interval never clears it
    probe = probe_bf16(*timers(1.1, 1.0, jitter=(1.0, 1.08, 0.93, 1.04, 0.97)))
    assert probe.outcome == "not told apart" and len(probe.fp32_s) == PROBE_MAX_ROUNDS
    assert "not told apart" in probe.words()


def test_resolve_precision_gives_the_choice_and_its_figures():
    fp32, bf16 = timers(1.0, 0.5)
    chosen = resolve_precision("auto", torch.device("cpu"), cpu_has_bf16=True,
                               step_timer=lambda precision: fp32 if precision.name == "fp32" else bf16)
    assert chosen.name == "bf16" and "interleaved rounds" in chosen.reason and "2.0" in chosen.reason
    assert resolve_precision("auto", torch.device("cpu"), cpu_has_bf16=False).name == "fp32"
