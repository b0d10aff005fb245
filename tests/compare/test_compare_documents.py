"""gpufeed compare on hand-made result pairs with known differences, against hand-derived figures."""

from __future__ import annotations

import numpy as np
import pytest
from tests.compare.documents import bench_document, doctor_document, fixture, train_document, write

from gpufeed.compare.documents import compare_documents, compare_files
from gpufeed.compare.model import gate
from gpufeed.errors import ConfigError
from gpufeed.measure.difference import Samples, block_steps, bootstrap_interval, resample_indices

STEPS = 60


def figure(comparison, key):
    return next(f for f in comparison.figures if f.key == key)


def noisy_waits(seed: int, mean_ms: float, spread_ms: float) -> np.ndarray:
    return np.clip(np.random.default_rng(seed).normal(mean_ms, spread_ms, STEPS), 0.0, None)


def test_a_part_10_ms_slower_in_every_step_is_named_with_its_figures():
    waits = noisy_waits(1, 20.0, 2.0)
    comparison = compare_documents(doctor_document(waits), doctor_document(waits + 10.0))
    wait = figure(comparison, "data_wait")
    assert wait.base == pytest.approx(waits.mean()) and wait.difference == pytest.approx(10.0)
    assert 0.0 < wait.interval.low < 10.0 < wait.interval.high  # the runs are resampled apart: noise from both
    assert wait.real is True
    getitem = figure(comparison, "getitem")  # 90% of the wait, ms a batch of one batch a step
    assert getitem.difference == pytest.approx(9.0) and getitem.real is True
    base_per_sample = (waits.sum() + STEPS * 12.0) / (STEPS * 32)  # ms: the wall over the samples
    new_per_sample = (waits.sum() + STEPS * 22.0) / (STEPS * 32)
    assert figure(comparison, "ms_per_sample").base == pytest.approx(base_per_sample)
    assert comparison.slower == pytest.approx(new_per_sample / base_per_sample - 1.0)
    assert comparison.slower_real is True
    low, high = comparison.slower_interval
    assert low < comparison.slower < high
    percent = round(100 * comparison.slower)
    assert comparison.headline == (f"NEW is {percent}% slower per sample: data wait +10.0 ms a step (getitem +9.0 ms "
                                   f"a batch); forward, backward and optimizer unchanged")
    for key in ("forward", "backward", "optimizer"):
        assert figure(comparison, key).difference == pytest.approx(0.0) and figure(comparison, key).real is False
    assert comparison.conditions == [] and not comparison.across_machines


def test_a_difference_buried_in_noise_is_no_change_with_its_interval():
    base, new = noisy_waits(2, 30.0, 10.0), noisy_waits(3, 30.5, 10.0)
    comparison = compare_documents(doctor_document(base), doctor_document(new))
    assert comparison.slower_real is False
    low, high = comparison.slower_interval
    assert low < 0.0 < high
    assert comparison.headline.startswith(f"no change per sample (NEW's time per sample {comparison.slower:+.1%}, "
                                          f"within the noise: "
                                          f"{low:+.1%} to {high:+.1%})")
    assert figure(comparison, "data_wait").real is False
    outcome = gate(comparison, 0.0)  # slower by more than 0%, perhaps, but not beyond the noise
    assert not outcome.failed and ("within the noise" in outcome.sentence or "faster" in outcome.sentence)


def test_two_machines_are_listed_first_and_named_in_the_headline():
    waits = noisy_waits(4, 20.0, 1.0)
    comparison = compare_documents(doctor_document(waits), doctor_document(waits, cpu="AMD EPYC 9654"))
    assert comparison.across_machines
    assert comparison.conditions[0] == "CPU: Intel(R) Xeon(R) Processor (BASE) vs AMD EPYC 9654 (NEW)"
    assert comparison.headline.startswith("across two machines (BASE Intel(R) Xeon(R) Processor, none; NEW AMD EPYC "
                                          "9654, none): ")


def test_other_settings_are_listed_as_differences():
    waits = noisy_waits(5, 20.0, 1.0)
    new = doctor_document(waits, batch=64)
    new["about"]["gpufeed"] = "99.0"
    new["about"]["argv"] = ["gpufeed", "doctor", "--json", "x.json", "train.py", "--lr", "0.1"]
    lines = compare_documents(doctor_document(waits), new).conditions
    assert "batch size: 32 (BASE) vs 64 (NEW)" in lines
    assert any(line.startswith("gpufeed: ") for line in lines)
    assert any("rules may grade the same run differently" in line for line in lines)
    assert "command: `gpufeed doctor --steps 30 --try input_bound.py` (BASE) vs `gpufeed doctor train.py --lr 0.1` " \
           "(NEW)" in lines


def test_findings_that_appear_disappear_or_change_grade():
    waits = noisy_waits(6, 20.0, 1.0)
    base, new = doctor_document(waits), doctor_document(waits)
    new["findings"] = [dict(base["findings"][0], severity="low"),
                       dict(base["findings"][0], kind="sync_stall", severity="medium")]
    statuses = {f.kind: f.status for f in compare_documents(base, new).findings}
    assert statuses == {"input_bound": "changed grade", base["findings"][1]["kind"]: "disappeared",
                        "sync_stall": "appeared"}


def test_a_format_1_doctor_result_has_no_forward_backward_optimizer_so_compute_is_one_part():
    waits = noisy_waits(7, 20.0, 1.0)
    old = doctor_document(waits)
    old["about"]["format"] = 1
    for step in old["timeline"]["steps"]:
        for key in ("forward_s", "backward_s", "optimizer_s"):
            del step[key]
    comparison = compare_documents(old, doctor_document(waits + 5.0))
    keys = [f.key for f in comparison.figures]
    assert "compute" in keys and "forward" not in keys
    assert figure(comparison, "compute").difference == pytest.approx(0.0)  # 12 ms a step in both
    assert any("compute is compared as one part" in note for note in comparison.notes)


def test_train_results_compare_throughput_data_wait_and_accuracy():
    wall, wait = np.full(40, 100.0), np.full(40, 10.0)
    wall[::7] += 5.0  # some noise, the same in both
    comparison = compare_documents(train_document(wall, wait), train_document(wall * 1.2, wait + 20.0,
                                                                              accuracy=0.5))
    assert figure(comparison, "samples_per_s").base == pytest.approx(256 * 40 / (wall.sum() / 1000.0))
    assert comparison.slower == pytest.approx(0.2) and comparison.slower_real
    assert figure(comparison, "data_wait").difference == pytest.approx(20.0)
    assert figure(comparison, "validation_accuracy").difference == pytest.approx(0.02)
    assert figure(comparison, "validation_accuracy").real is None  # one value a run: not judged
    assert comparison.headline.startswith("NEW is 20% slower per sample: data wait +20.0 ms a step")
    assert comparison.headline.endswith("validation accuracy 48.0% (BASE) and 50.0% (NEW)")


def test_a_format_1_train_result_compares_on_totals_and_says_the_significance_is_not_computed():
    old = fixture("train")  # format 1: no per-step records
    new = train_document(np.full(10, 150.0), np.full(10, 1.0))
    comparison = compare_documents(old, new)
    assert comparison.method == "totals only (a result without per-step samples)"
    assert any(note.startswith("BASE has no per-step samples (format 1)") for note in comparison.notes)
    rate = figure(comparison, "samples_per_s")
    assert rate.base == pytest.approx(old["samples_per_s"]) and rate.interval is None and rate.real is None
    assert comparison.slower_real is None and "could not be computed" in comparison.headline
    outcome = gate(comparison, 1.0)
    assert not outcome.failed and "could not be computed" in outcome.sentence


def test_bench_results_compare_each_figure_and_the_training_steps_per_sample():
    comparison = compare_documents(bench_document(1.0, seed=1), bench_document(2.0, seed=2))
    kernels = [f for f in comparison.figures if f.key.startswith("kernel ")]
    assert len(kernels) == len(fixture("bench")["kernels"])
    assert all(f.ratio == pytest.approx(2.0, rel=0.03) and f.real for f in kernels)
    assert comparison.slower == pytest.approx(1.0, rel=0.03) and comparison.slower_real
    assert comparison.headline.startswith("NEW takes 2.0x BASE's time per sample in its training steps")
    same = compare_documents(bench_document(1.0, seed=1), bench_document(1.0, seed=2))
    assert same.slower_real is False


@pytest.mark.parametrize("slower, words", [
    (0.23, "NEW is 23% slower per sample"), (0.004, "NEW is 0.4% slower per sample"),
    (7.9, "NEW takes 8.9x BASE's time per sample"), (1 / 1.12 - 1, "NEW is 12% faster per sample"),
    (0.48 - 1, "NEW is 2.08x as fast per sample"), (1 / 1.004 - 1, "NEW is 0.4% faster per sample"),
])
def test_faster_is_said_in_rate_and_slower_in_time(slower, words):
    """0.48 of BASE's time per sample is 2.08x the samples a second, not "52% faster"."""
    from gpufeed.compare.model import per_sample_words

    assert per_sample_words(slower) == words


def test_the_bootstrap_interval_matches_the_normal_theory_one_on_independent_steps():
    """Independent steps: the 95% interval of a difference of means is about ±1.96 sqrt(2 s²/n) (float64)."""
    rng = np.random.default_rng(11)
    first, second = rng.normal(10.0, 1.0, 1000), rng.normal(10.0, 1.0, 1000)
    interval = bootstrap_interval(Samples(first), Samples(second))
    half = 1.96 * np.sqrt(first.var(ddof=1) / 1000 + second.var(ddof=1) / 1000)
    centre = second.mean() - first.mean()
    assert interval.low == pytest.approx(centre - half, abs=0.25 * half)
    assert interval.high == pytest.approx(centre + half, abs=0.25 * half)


def test_blocks_are_consecutive_steps_of_the_cube_root_length():
    assert [block_steps(n) for n in (1, 8, 50, 1000)] == [1, 2, 4, 10]
    rows = resample_indices(50, 4, np.random.default_rng(0), resamples=3)
    assert rows.shape == (3, 50) and rows.min() >= 0 and rows.max() <= 49
    for row in rows:
        for start in range(0, 48, 4):
            assert list(row[start:start + 4]) == list(range(row[start], row[start] + 4))


def test_an_autocorrelated_run_gets_a_wider_interval_than_independent_steps_would():
    """Slow stretches of 10 steps: the block bootstrap's interval is wider than one resampling single steps."""
    stretch = np.repeat(np.random.default_rng(3).normal(0, 5.0, 20), 10) + 50.0
    other = np.repeat(np.random.default_rng(4).normal(0, 5.0, 20), 10) + 50.0
    blocked = bootstrap_interval(Samples(stretch), Samples(other))
    rng = np.random.default_rng(0)
    single = [other[rng.integers(0, 200, 200)].mean() - stretch[rng.integers(0, 200, 200)].mean()
              for _ in range(2000)]
    low, high = np.percentile(single, [2.5, 97.5])
    assert blocked.high - blocked.low > 1.5 * (high - low)


@pytest.mark.parametrize("fault, message", [
    ("commands", "a doctor result and"),
    ("plan", "is a plan result; gpufeed compare reads doctor, train and bench results"),
    ("not gpufeed", "has no 'about' block"),
    ("newer", "newer"),
])
def test_bad_input_is_one_line_naming_what_is_wrong(tmp_path, fault, message):
    waits = noisy_waits(8, 20.0, 1.0)
    base = write(tmp_path / "base.json", doctor_document(waits))
    other = {"commands": fixture("train"), "plan": fixture("plan"), "not gpufeed": {"steps": [1, 2]},
             "newer": dict(doctor_document(waits), about=dict(fixture("doctor")["about"], format=3))}[fault]
    new = write(tmp_path / "new.json", other)
    with pytest.raises(ConfigError, match=message) as caught:
        compare_files(base, new)
    assert "\n" not in str(caught.value)
