"""The verdict by cost (findings/verdict.py, shares.py) and the report's invariants (invariants.py), on hand-built
observations whose shares are hand-derived: the waste with the largest share over its kind's level is the
verdict, whatever the grades; shares are disjoint; compute_bound when no waste reaches its level; near-ties said;
an input wait beside workers that keep up is not the verdict; tiny loader parts are not blamed."""

import dataclasses
import random

import pytest
from observations import by_kind, host, on_cpu, on_gpu, step, steps

from gpufeed.doctor.findings import invariants, shares
from gpufeed.doctor.findings.diagnose import diagnose
from gpufeed.doctor.findings.report import Finding, Gain, Report, Verdict, rates_sentence, verdict_headline
from gpufeed.doctor.observation import Ranks, RankSummary
from gpufeed.measure.steps import LoaderSplit


def test_a_serial_loader_waiting_a_quarter_of_the_step_is_the_verdict_with_its_share():
    report = diagnose(on_cpu(steps(20, wall=0.1, wait=0.024), host(), workers=0))
    assert report.verdict.primary == "input_bound"
    assert report.verdict.share == pytest.approx(0.24)
    assert report.findings[0].kind == "input_bound"  # the verdict's finding first
    assert verdict_headline(report.to_json()) == "input_bound: 24% of the step (high)"
    # every step waits exactly 24%: the interval is the point
    assert report.findings[0].evidence["share_interval"] == pytest.approx([0.24, 0.24])


def _ranks(step_ms: float, exposed_ms: float) -> Ranks:
    per_rank = tuple(RankSummary(rank, 20, step_ms, 0.0, step_ms - exposed_ms, 10.0, exposed_ms, 4e6,
                                 slowest_share=0.5) for rank in (0, 1))
    return Ranks(2, per_rank, (), exposed_ms, 10.0)


def test_a_balanced_ddp_job_whose_all_reduce_is_4_percent_is_compute_bound_with_communication_under_it():
    # 52 ms steps, 2.08 ms of them waiting at the all-reduce: 4%, over the TF profiler's 3% "moderate" (so the
    # finding is medium) but under torch-tb-profiler's 10% level for a fix
    seen = on_cpu(steps(20, wall=0.052), host(), ranks=_ranks(52.0, 2.08))
    report = diagnose(seen)
    found = by_kind(report)
    assert report.verdict.primary == "compute_bound"
    assert found["communication"].share == pytest.approx(0.04) and found["communication"].severity == "medium"
    # compute_bound is what the communication leaves of the step: 96%
    assert found["compute_bound"].share == pytest.approx(0.96) and report.verdict.share == pytest.approx(0.96)
    assert [f.kind for f in report.findings][:2] == ["compute_bound", "communication"]
    assert verdict_headline(report.to_json()).startswith("compute_bound: no waste reaches its level; the model's "
                                                         "own work is 96% of the step")


def test_over_its_level_the_all_reduce_is_the_verdict():
    report = diagnose(on_cpu(steps(20, wall=0.05), host(), ranks=_ranks(50.0, 15.0)))  # 30% waiting
    assert report.verdict.primary == "communication" and report.verdict.share == pytest.approx(0.30)


def test_a_grade_never_outranks_a_larger_share():
    # a 6% data wait (medium) against float64 arithmetic governing the other 94% (always graded high): precision;
    # and the other way round, a 60% data wait (high) against the 40% float64 governs: input_bound
    report = diagnose(on_cpu(steps(20, wall=0.1, wait=0.006), host(), float64_seen=True))
    assert report.verdict.primary == "precision" and report.verdict.share == pytest.approx(0.94)
    assert by_kind(report)["input_bound"].share == pytest.approx(0.06)
    report = diagnose(on_cpu(steps(20, wall=0.1, wait=0.06), host(), float64_seen=True))
    assert report.verdict.primary == "input_bound" and report.verdict.share == pytest.approx(0.6)
    assert by_kind(report)["precision"].severity == "high" and by_kind(report)["precision"].share == \
        pytest.approx(0.4)


def test_shares_are_disjoint_a_finding_of_the_whole_step_caps_the_others():
    # on a GPU busy 10% of the step while the host's cores are saturated: cpu_saturated claims the idle 90% of
    # the whole step first; input_bound's 50% data wait gets what is left of its part within the step: 10%
    seen = on_gpu(steps(20, wall=0.1, wait=0.05, compute=0.01), host(cpu=99.0))
    report = diagnose(seen)
    found = by_kind(report)
    assert found["cpu_saturated"].share == pytest.approx(0.9)
    assert found["input_bound"].share == pytest.approx(0.1)
    assert found["input_bound"].evidence["share_measured"] == pytest.approx(0.5)
    assert sum(f.share for f in report.findings if f.kind != "memory_pressure") <= 1.0 + 1e-9
    assert report.verdict.primary == "cpu_saturated"


def test_step_parts_are_hand_derived():
    seen = on_gpu(steps(20, wall=0.1, wait=0.02, copy=0.01, sync=0.005, syncs=1, compute=0.05), host())
    parts = shares.step_parts(seen)
    assert parts["data_wait"] == pytest.approx(0.2) and parts["copy"] == pytest.approx(0.1)
    assert parts["sync"] == pytest.approx(0.05) and parts["collective"] == 0.0
    assert parts["model"] == pytest.approx(0.65)  # 1 - 0.2 - 0.1 - 0.05
    assert parts["busy"] == pytest.approx(0.5) and parts["idle"] == pytest.approx(0.15)


def test_the_share_interval_is_the_ratio_estimators():
    waits = [0.01, 0.03] * 10
    seen = on_cpu([step(i, wall=0.1, wait=w) for i, w in enumerate(waits)], host())
    low, high, estimate = shares.share_interval(seen, "data_wait_s")
    # r = 0.4 / 2.0 = 0.2; residuals x - 0.2 * 0.1 = +-0.01; s^2 = 20 * 1e-4 / 19; se = sqrt(s^2 / 20) / 0.1
    se = ((20 * 1e-4 / 19) / 20) ** 0.5 / 0.1
    assert estimate == pytest.approx(0.2)
    assert (low, high) == pytest.approx((0.2 - 1.959964 * se, 0.2 + 1.959964 * se))


def test_a_near_tie_is_said_not_picked_silently():
    rng = random.Random(7)
    records = []
    for index in range(20):  # about 30% data wait and 30% host syncs a step, each drawn about its mean
        wait, sync = rng.uniform(0.02, 0.04), rng.uniform(0.02, 0.04)
        records.append(step(index, wall=0.1, wait=wait, sync=sync, syncs=1))
    report = diagnose(on_cpu(records, host()))
    primary = report.verdict.primary
    assert primary in ("input_bound", "sync_stall")
    assert report.verdict.tied_with == [{"input_bound": "sync_stall", "sync_stall": "input_bound"}[primary]]
    assert "near-tie with" in verdict_headline(report.to_json())
    # far apart (10% against 40%), no tie
    apart = diagnose(on_cpu([step(i, wall=0.1, wait=rng.uniform(0.009, 0.011), sync=0.04, syncs=1)
                             for i in range(20)], host()))
    assert apart.verdict.primary == "sync_stall" and apart.verdict.tied_with == []


def _split(records, getitem_ms: float, collate_ms: float, handover_ms: float):
    """Each record's batch timed inside the loader (doctor/loader_split.py's parts), per batch."""
    return [dataclasses.replace(r, loader_split=LoaderSplit(1, getitem_ms / 1000, collate_ms / 1000,
                                                            handover_ms / 1000, None)) for r in records]


def test_an_input_wait_beside_workers_that_keep_up_is_not_the_verdict():
    # 4 workers, a batch costs them 20 ms of __getitem__ and collate: 5 ms a batch to the loop; hand-over 1 ms;
    # the model takes 90 ms a batch: the workers prepare 18x what it consumes. The 10% wait is not throughput.
    records = _split(steps(20, wall=0.1, wait=0.01), 18.0, 2.0, 1.0)
    report = diagnose(on_cpu(records, host(), workers=4))
    found = by_kind(report)["input_bound"]
    assert found.evidence["workers_supply_ratio"] == pytest.approx(90.0 / 5.0)
    assert report.verdict.primary == "compute_bound"
    assert any(note.text.startswith("verdict: not input_bound") and "18.0x" in note.text for note in report.notes)
    # the same wait with slow workers (each batch 400 ms over 4 workers: 100 ms a batch, 0.9x): input_bound
    slow = diagnose(on_cpu(_split(steps(20, wall=0.1, wait=0.01), 390.0, 10.0, 1.0), host(), workers=4))
    assert slow.verdict.primary == "input_bound"
    assert by_kind(slow)["input_bound"].evidence["workers_supply_ratio"] == pytest.approx(0.9)


def test_loader_parts_under_a_tenth_of_a_millisecond_are_not_blamed_nor_packed_for():
    # num_workers=0, a batch of 2: __getitem__ 0.02 ms and collate 0.03 ms a batch, a 9% wait all the same
    records = _split(steps(20, wall=0.001, wait=0.00009), 0.02, 0.03, 0.0)
    records = [dataclasses.replace(r, loader_split=dataclasses.replace(r.loader_split, handover_s=None))
               for r in records]
    report = diagnose(on_cpu(records, host(), workers=0, batch_size=2))
    found = by_kind(report)["input_bound"]
    assert found.evidence["dominant_part"] is None and found.evidence["parts_below_blame"] is True
    assert "takes the most" not in found.fix and "gpufeed pack" not in found.fix
    assert "fixed cost per batch" in found.fix and "__getitem__ 0.02 ms" in found.fix


def test_rates_without_workers_never_keep_up():
    report = diagnose(on_cpu(steps(20, wall=0.1, wait=0.024), host(), workers=0))
    document = report.to_json()
    assert document["loader_workers"] == 0
    # 64 samples a step: the loader 64 / 0.024 s = 2,667/s while it runs, the model 64 / 0.076 s = 842/s;
    # in series 64 / 0.1 s = 640/s
    sentence = rates_sentence(document)
    assert "keeps up" not in sentence and "in series" in sentence
    assert "2,667 samples/s" in sentence and "842 samples/s" in sentence and "640 samples/s" in sentence
    # workers unread or background: a loader that keeps the wait small keeps up
    quiet = diagnose(on_cpu(steps(20, wall=0.1, wait=0.001), host(), workers=4)).to_json()
    assert "keeps up" in rates_sentence(quiet) and "NA" not in rates_sentence(quiet)


def _report(findings, primary, share, workers=2):
    return Report(Verdict(primary, None, 0.0, 20, "cpu", 1, share), findings, [], None, 1000.0, None,
                  loader_workers=workers)


def _finding(kind, share, evidence=None, fix="", gain=None):
    return Finding(kind, "high", share, evidence or {}, fix, "", gain, "high")


def test_the_invariants_catch_each_planted_contradiction():
    wait = _finding("input_bound", 0.3, {"loader_workers": 2, "dominant_part": None})
    healthy = _finding("compute_bound", 0.7)
    assert invariants.violations(_report([healthy, wait], "compute_bound", 0.7)) == [
        "compute_bound is the verdict, but input_bound is over its level (30.0%)"]
    assert invariants.violations(_report([wait, healthy], "input_bound", 0.3)) == []
    too_much = _finding("sync_stall", 0.8)
    assert "the findings' shares sum to 1.100 > 1" in invariants.violations(_report([wait, too_much],
                                                                                    "sync_stall", 0.8))
    smaller = _report([_finding("sync_stall", 0.1), wait], "sync_stall", 0.1)
    assert invariants.violations(smaller) == ["input_bound has a larger share than the verdict sync_stall"]
    path = _finding("input_bound", 0.3, {"collate_site": "/v/lib/python3.12/site-packages/torch/x.py:3"})
    assert any("installed package's full path" in v for v in invariants.violations(_report([path], "input_bound",
                                                                                            0.3)))
    float64 = _finding("precision", 0.9, {"fp64_flops_per_step": 0, "float64_tensor_seen": False})
    assert invariants.violations(_report([float64], "precision", 0.9)) == [
        "precision claims float64 with no fp64 FLOPs counted and no float64 tensor seen"]
    # a 1.71x gain beside a 24% share (at most 1/0.76 x 1.1 = 1.45x) needs its reason in the gain's text
    gain = Gain(1.71, "3 pairs", "num_workers=2", 1.6, 1.8, 3)
    fast = _finding("input_bound", 0.24, {"loader_workers": 0}, gain=gain)
    assert invariants.violations(_report([fast], "input_bound", 0.24)) == [
        "input_bound: a gain of 1.71x beside a share of 24% (at most 1.45x) with no reason given"]
    explained = dataclasses.replace(gain, how=f"3 pairs; {invariants.BEYOND_SHARE}: the workers share the cores")
    assert invariants.violations(_report([dataclasses.replace(fast, gain=explained)], "input_bound", 0.24)) == []


def test_a_violation_raises_under_the_strict_setting_and_is_a_note_otherwise(monkeypatch):
    broken = _report([_finding("compute_bound", 0.7), _finding("input_bound", 0.3, {"loader_workers": 2})],
                     "compute_bound", 0.7)
    with pytest.raises(AssertionError, match="contradicts itself"):
        invariants.checked(broken)
    monkeypatch.delenv(invariants.STRICT)
    noted = invariants.checked(broken)
    assert "please report it" in noted.notes[-1].text and noted.findings == broken.findings


def test_a_try_gain_beyond_its_share_gets_its_reason():
    from gpufeed.doctor.trials.runs import beyond_share

    wait = _finding("input_bound", 0.24, {"loader_workers": 0})
    # the replay's 1.71x beside a 24% wait: removing the wait whole gives 1 / 0.76 = 1.32x (1.45x with the slack)
    gain = beyond_share(wait, Gain(1.30, "workers: 1.30x", "num_workers=2", 1.2, 1.4, 3, bound=1.71))
    assert "the bound 1.71x beside a share of 24%, which removed whole gives 1.32x" in gain.how
    assert "the fix" not in gain.how.split(invariants.BEYOND_SHARE)[1]  # 1.30x is within what 24% allows
    assert invariants.violations(_report([dataclasses.replace(wait, gain=gain)], "input_bound", 0.24)) == []
    within = Gain(1.30, "workers: 1.30x", "num_workers=2", 1.2, 1.4, 3)
    assert beyond_share(wait, within) == within
