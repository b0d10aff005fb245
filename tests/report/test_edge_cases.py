"""The pages on the documents users produce at the edges: markup and `$` in their strings, nulls where NaN was, runs
far longer than the fixtures, a machine the probe could not read, a user's own matplotlib settings."""

from __future__ import annotations

import copy
import json
import math
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import matplotlib
import pytest
from pagecheck import parse_page, visible  # the page checks shared by the report tests

from gpufeed.errors import ConfigError
from gpufeed.report.doctor_page import groups, step_bars
from gpufeed.report.document import load_document, render
from gpufeed.report.html import new_figure
from gpufeed.report.train_page import plot_over_time

FIXTURES = Path(__file__).parent / "fixtures"
MARKUP = "a<b>&c\"d'e</pre></td><script>alert(1)</script>"


def load(command: str) -> dict:
    return json.loads((FIXTURES / f"{command}.json").read_text(encoding="utf-8"))


def chart_texts(page: str) -> list[str]:
    """The text of every <text> element of the inline SVG charts (svg.fonttype none keeps text as text)."""
    return [re.sub(r"\s+", " ", text).strip() for text in re.findall(r"<text\b[^>]*>(.*?)</text>", page, re.S)]


# --- strings from the document -----------------------------------------------------------------------------------

def test_dollars_in_data_strings_are_drawn_literally_not_as_mathtext():
    """Matplotlib reads `$...$` as math: `m$1$_x` would be drawn as `m` and an italic `1` with `x` lowered."""
    bench = load("bench")
    bench["train_steps"][0]["model"] = "m$1$_x"
    plan = load("plan")
    plan["gpus"][0]["name"] = "A$B$ 80GB"
    doctor = load("doctor")
    doctor["findings"][0]["kind"] = "odd_$k$"
    for document, literal in ((bench, "m$1$_x, batch"), (plan, "A$B$ 80GB"), (doctor, "odd_$k$")):
        page = render(document)
        assert "<tspan" not in page  # mathtext is written as positioned <tspan> glyphs
        assert any(text.startswith(literal) for text in chart_texts(page)), literal


def test_markup_in_every_user_string_stays_text():
    doctor = load("doctor")
    doctor["about"]["argv"] = ["gpufeed", "doctor", f"{MARKUP}.py"]
    doctor["about"]["machine"]["accelerators"] = [{"name": "A&B <GPU>", "memory_bytes": 2**30, "driver_version": "5"}]
    doctor["script_error"] = MARKUP
    doctor["findings"][0].update(snippet=MARKUP, fix=MARKUP)
    doctor["findings"][0]["evidence"][MARKUP] = MARKUP
    page = render(doctor)
    text = visible(parse_page(page))  # balanced, nothing fetched, no <script
    assert f"gpufeed doctor {MARKUP}.py" in text and "A&B <GPU> (1.0 GiB, driver 5)" in text
    assert text.count(MARKUP) >= 5  # command, error, fix, snippet, evidence key and value


def test_a_users_matplotlib_settings_do_not_change_the_page():
    """The page is a function of the document: text.usetex (which needs LaTeX and reads `&` as TeX), a big font
    or another colour cycle set by the user's matplotlibrc or the calling process must not reach it."""
    document = load("doctor")
    plain = render(document)
    user = {"text.usetex": True, "font.size": 30, "lines.linewidth": 7, "figure.dpi": 50, "svg.fonttype": "path",
            "axes.prop_cycle": matplotlib.cycler(color=["black"])}
    with matplotlib.rc_context(user):
        assert render(copy.deepcopy(document)) == plain
        assert matplotlib.rcParams["font.size"] == 30  # and the caller's settings are left as they were


@pytest.mark.slow
def test_the_same_document_gives_the_same_bytes_in_another_process():
    """Ids, hash salts and any set ordering must not depend on the process (PYTHONHASHSEED varies per run). The
    two processes run side by side."""
    script = ("import hashlib, json, sys; from gpufeed.report.document import render; "
              "print(' '.join(hashlib.sha256(render(json.load(open(sys.argv[1] + '/' + name + '.json'))).encode())"
              ".hexdigest() for name in ('train', 'doctor', 'bench', 'plan')))")
    processes = [subprocess.Popen([sys.executable, "-c", script, str(FIXTURES)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONHASHSEED": seed})
                 for seed in ("1", "2")]
    outputs = [process.communicate(timeout=240) for process in processes]
    assert [process.returncode for process in processes] == [0, 0], [err for _, err in outputs]
    digests = {out for out, _ in outputs}
    assert len(digests) == 1 and len(digests.pop().split()) == 4


# --- nulls (NaN and infinities are saved as null) ----------------------------------------------------------------

def test_a_precision_run_whose_loss_diverged_makes_a_bench_page():
    bench = load("bench")
    bench["precision_runs"][-1]["validation_loss"] = None  # fp16 overflowed: the loss was NaN
    text = visible(parse_page(render(bench)))
    row = bench["precision_runs"][-1]
    assert re.search(rf"{row['precision']} {row['device']} \S+ NA {row['seconds']:.2f}", text)


def test_a_train_run_with_no_finite_loss_says_so_instead_of_an_empty_panel():
    train = load("train")
    for log in train["timeline"]:
        log["loss"] = None
    train["test_loss"] = None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warned "No artists with labels found to put in legend"
        page = render(train)
    text = visible(parse_page(page))
    assert "The loss was not finite (NaN or infinite) in 26 of the 26 intervals." in text
    assert "no finite loss in any interval" in chart_texts(page)


def test_a_train_run_whose_loss_went_nan_late_names_the_gaps():
    train = load("train")
    for log in train["timeline"][20:]:
        log["loss"] = None
    text = visible(parse_page(render(train)))
    assert "The loss was not finite (NaN or infinite) in 6 of the 26 intervals: the line has gaps there." in text


def test_nan_written_by_another_json_writer_reads_as_null(tmp_path: Path):
    source = tmp_path / "run.json"
    text = (FIXTURES / "train.json").read_text(encoding="utf-8")
    source.write_text(re.sub(r'"test_loss": [^,]+,', '"test_loss": NaN,', text, count=1), encoding="utf-8")
    document = load_document(source)  # the fixture is saved under the old names: read under today's
    assert document["validation_loss"] is None and "test_loss" not in document
    assert "validation loss NA" in visible(parse_page(render(document)))


def test_a_zero_or_slower_gain_draws_on_a_linear_axis():
    """A log axis for the gains divided by the smallest gain: 0 raised ZeroDivisionError (a traceback)."""
    doctor = load("doctor")
    doctor["findings"][0]["gain"].update(measured=0.0, range=[0.0, 0.0])
    text = visible(parse_page(render(doctor)))
    assert "Tried: DataLoader(num_workers=2, persistent_workers=True): 0.00x (0.00–0.00 over 3 pairs), slower" in text


def test_a_gain_saved_before_the_fix_and_the_bound_were_told_apart_still_draws():
    """Documents saved by an earlier gpufeed have only `measured` and `how`."""
    doctor = load("doctor")
    doctor["findings"][0]["gain"] = {"measured": 106.41, "how": "replayed the first 8 batches: 30 steps"}
    text = visible(parse_page(render(doctor)))
    assert "Tried: the change: 106.41x. How: replayed the first 8 batches: 30 steps." in text


def test_an_error_in_a_page_is_a_bug_and_not_blamed_on_the_document(monkeypatch: pytest.MonkeyPatch):
    """A page that raises on a document its checks passed is a bug of gpufeed's: the error propagates (before,
    any such error read "was it edited or damaged?", blaming the user's fresh document)."""
    def divide(_document):
        return 1 / 0

    monkeypatch.setattr("gpufeed.report.doctor_page.doctor_page", divide)
    with pytest.raises(ZeroDivisionError):
        render(load("doctor"))


def test_a_damaged_value_is_named_by_its_place_in_the_document():
    doctor = load("doctor")
    doctor["timeline"]["steps"][3]["wall_s"] = "fast"
    with pytest.raises(ConfigError) as caught:
        render(doctor)
    assert str(caught.value) == (
        "the doctor document has a value of the wrong kind (timeline.steps[3].wall_s: a number expected, found the "
        "string 'fast'): was it edited or damaged? write it again with `gpufeed doctor --json`")
    del doctor["timeline"]["steps"][3]["wall_s"]
    with pytest.raises(ConfigError, match=r"the doctor document lacks the key timeline\.steps\[3\]\.wall_s: was"):
        render(doctor)


# --- long runs -----------------------------------------------------------------------------------------------------

def long_doctor(steps: int, samples: int) -> dict:
    """A watch of `steps` steps of 20 ms (a 200 ms stall every 500th) and `samples` host readings."""
    document = load("doctor")
    first_step, first_sample = document["timeline"]["steps"][0], document["timeline"]["samples"][0]
    document["timeline"]["steps"] = [
        dict(first_step, index=index, wall_s=0.2 if index % 500 == 499 else 0.02, data_wait_s=0.01)
        for index in range(steps)]
    document["timeline"]["samples"] = [dict(first_sample, time_s=0.1 * index, cpu_percent=float(index % 100),
                                            cpu_per_core_percent=[10.0, 90.0]) for index in range(samples)]
    return document


def test_groups_are_equal_runs_of_consecutive_indices():
    assert groups(10, 4) == [range(0, 3), range(3, 6), range(6, 9), range(9, 10)]
    assert groups(4, 4) == [range(0, 1), range(1, 2), range(2, 3), range(3, 4)]
    assert groups(0, 4) == []


def test_step_bars_are_group_means_with_the_slowest_step():
    steps = [{"index": index, "wall_s": wall, "data_wait_s": wait, "copy_s": 0.0, "compute_s": None, "sync_s": 0.0}
             for index, (wall, wait) in enumerate([(0.010, 0.004), (0.030, 0.010), (0.020, 0.001), (0.050, 0.002),
                                                   (0.010, 0.005)])]
    bars = step_bars(steps, limit=2)  # groups of 3: steps 0-2 and 3-4
    assert [(bar["first_step"], bar["steps"], bar["slowest_step"]) for bar in bars] == [(0, 3, 1), (3, 2, 3)]
    assert bars[0]["wall_ms"] == pytest.approx(20.0) and bars[1]["wall_ms"] == pytest.approx(30.0)
    assert bars[0]["slowest_ms"] == pytest.approx(30.0) and bars[1]["slowest_ms"] == pytest.approx(50.0)
    assert bars[0]["parts"]["data wait"] == pytest.approx(5.0)  # (4 + 10 + 1) / 3 ms
    assert bars[0]["parts"]["other host"] == pytest.approx(15.0)  # (6 + 20 + 19) / 3 ms
    assert "compute" not in bars[0]["parts"]
    assert [bar["steps"] for bar in step_bars(steps)] == [1] * 5  # under the limit: one bar per step


def test_a_5000_step_watch_makes_a_page_of_grouped_bars():
    """Before: 25,000 bar segments and 6 MB of SVG in 18 s. Now 200 bars, the stalls marked, under 1 MB."""
    document = long_doctor(5000, 2000)
    page = render(document)
    text = visible(parse_page(page))
    assert len(page.encode("utf-8")) < 1_000_000
    assert ("Each bar is the mean of 25 consecutive watched steps (5,000 steps in 200 bars), drawn over the steps "
            "it covers") in text
    assert "With 2,000 readings, each point is the mean of 4 consecutive ones (500 points)." in text
    stalls = [bar for bar in step_bars(document["timeline"]["steps"]) if bar["slowest_ms"] > 100]
    assert [bar["slowest_step"] for bar in stalls] == list(range(499, 5000, 500))


def test_a_20000_interval_training_draws_time_weighted_means():
    timeline, seconds = [], 0.0
    for index in range(3000):  # intervals of 1, 2 and 3 s with readings 10, 20 and 30
        seconds += 1 + index % 3
        timeline.append({"seconds": seconds, "cpu_percent": 10.0 * (1 + index % 3)})
    figure, axes = new_figure()
    assert plot_over_time(axes, timeline, "cpu_percent", "CPU", "black")
    times, heights = axes.lines[0].get_xdata(), axes.lines[0].get_ydata()
    assert len(times) == 1001 and times[0] == 0.0 and times[1] == 6.0 and times[-1] == seconds
    assert heights[1] == pytest.approx((10 * 1 + 20 * 2 + 30 * 3) / 6)
    train = load("train")
    last = train["timeline"][-1]
    train["timeline"] = [dict(last, step=5 * (index + 1), seconds=0.5 * (index + 1)) for index in range(20_000)]
    train.update(steps=100_000, steps_this_run=100_000)
    page = render(train)
    assert len(page.encode("utf-8")) < 500_000
    assert "each level is the time-weighted mean of 20 consecutive intervals" in visible(parse_page(page))


# --- the about block ---------------------------------------------------------------------------------------------

def conditions(about_changes: dict) -> str:
    """The visible text of the conditions block of the train page with `about` changed."""
    document = load("train")
    document["about"].update(about_changes)
    text = visible(parse_page(render(document)))
    return text[text.index("command"):text.index("Result")]


def test_a_machine_the_probe_could_not_read_shows_its_reasons():
    machine = load("train")["about"]["machine"]
    text = conditions({"machine": {**machine, "cpu": {"model": {"reason": "no /proc/cpuinfo"},
                                                       "usable_cores": {"reason": "no affinity"}}}})
    assert "CPU NA (no /proc/cpuinfo), NA (no affinity) usable cores" in text
    assert "{'reason'" not in text
    assert "machine NA (probe failed)" in conditions({"machine": {"reason": "probe failed"}})
    text = conditions({"machine": {"cpu": {"reason": "x"}, "memory": {"reason": "y"}, "accelerators": {"reason": "z"},
                                   "software": {"reason": "w"}}})
    assert "CPU NA (x) RAM NA (y) accelerators NA (z) versions NA (w)" in text


def test_accelerators_with_memory_not_read_and_none_with_the_reason():
    machine = load("train")["about"]["machine"]
    gpu = {"name": "NVIDIA H100", "memory_bytes": {"reason": "NVML failed"}, "driver_version": {"reason": "NVML"}}
    assert "accelerators NVIDIA H100 (memory NA) versions" in conditions({"machine": {**machine,
                                                                                      "accelerators": [gpu]}})
    assert "accelerators none (torch 2.13.0+cpu was built without CUDA)" in conditions({})


def test_argv_absent_or_not_a_list():
    assert conditions({"argv": None}).startswith("command NA date")
    assert conditions({"argv": "gpufeed train"}).startswith("command gpufeed train date")
    document = load("train")
    del document["about"]["argv"], document["about"]["created"]
    text = visible(parse_page(render(document)))
    assert "command NA date NA gpufeed" in text


def test_number_formatting_of_nan():
    from gpufeed.report.html import number

    assert number(math.nan) == "NA" and number(math.inf) == "inf"


def test_settings_by_name_read_as_python_arguments_on_the_page_and_the_terminal():
    """evidence.settings (the doctor's, in the framework's names) is a dict: printed as the user writes it."""
    from gpufeed.cli.doctor_show import evidence_value
    from gpufeed.report.html import number

    settings = {"dataloader_num_workers": 0, "dataloader_prefetch_factor": None, "multiprocessing_context": "spawn"}
    assert number(settings) == ("dataloader_num_workers=0, dataloader_prefetch_factor=None, "
                                "multiprocessing_context='spawn'")
    assert evidence_value(settings) == "(" + number(settings) + ")"
    assert number({"reason": "not read"}) == "NA (not read)"  # the NA value keeps its own form


def test_byte_figures_read_as_sizes_in_the_terminal_s_evidence():
    """worker_memory's projected_worker_bytes printed 489579843: a byte count's key ends in _bytes, and the
    terminal shows it in MiB below 1 GiB and GiB from there (the --json keeps the bytes)."""
    from gpufeed.cli.doctor_show import evidence_value

    assert evidence_value(489_579_843, "projected_worker_bytes") == "467 MiB"  # 489,579,843 / 2**20 = 466.9
    assert evidence_value(3 * 2**30 + 2**29, "projected_total_bytes") == "3.50 GiB"
    assert evidence_value(None, "projected_total_bytes") == "NA"
    assert evidence_value(0.0326, "share_of_available") == "0.0326"
