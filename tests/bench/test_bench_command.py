"""gpufeed bench end to end on the CPU: the JSON shape the issue documents, NA precisions named, bad input."""

import dataclasses
import json
import statistics

import pytest

from gpufeed.bench import budget as budget_module
from gpufeed.bench import run as bench_run
from gpufeed.bench.results import PrecisionRun
from gpufeed.bench.summary import summarise
from gpufeed.cli.main import main


@pytest.fixture
def small(monkeypatch):
    """Shrink the sweep; the short trainings are tested in test_steps.py, here a stand-in keeps this fast."""
    monkeypatch.setattr(bench_run, "QUICK", dataclasses.replace(bench_run.QUICK, cpu_sizes=(64, 128)))
    # a busy test machine must not skip the CNN step: no budget a loaded machine could run past (the budgets'
    # logic is tested on a fake timer in test_budget.py)
    monkeypatch.setattr(bench_run, "QUICK_STEPS_S", 600.0)
    monkeypatch.setattr(bench_run, "QUICK_KERNELS_S", 600.0)
    monkeypatch.setattr(budget_module, "QUICK_MEASUREMENT_S", 600.0)  # what Budget.quick reads
    monkeypatch.setattr(bench_run, "QUICK_MEASUREMENT_S", 600.0)  # what the settings say

    def fake_runs(device, precisions, count, epochs):
        return [PrecisionRun(p, str(device), 0.5, 1.0, 1.0 if p != "fp64" else 3.0, 10) for p in precisions], []

    monkeypatch.setattr(bench_run, "precision_runs", fake_runs)


@pytest.mark.slow
def test_json_has_the_documented_shape(capsys, small):
    status = main(["bench", "--quick", "--device", "cpu", "--precision", "fp32,tf32", "--json", "-"])
    document = json.loads(capsys.readouterr().out)
    assert status == 0
    for key in ("kernels", "peaks", "train_steps", "link", "machine", "summary", "unmeasured"):
        assert key in document
    kernel = document["kernels"][0]
    for key in ("op", "device", "precision", "size", "seconds_median", "tflops", "fraction_of_peak"):
        assert key in kernel
    for figure in document["kernels"] + document["train_steps"]:  # every repeat, as a JSON list
        assert isinstance(figure["seconds"], list) and len(figure["seconds"]) == figure["runs"]
        assert (statistics.median(figure["seconds"]), min(figure["seconds"]), max(figure["seconds"])) == (
            figure["seconds_median"], figure["seconds_min"], figure["seconds_max"])
    matmuls = [k for k in document["kernels"] if k["op"] == "matmul"]
    assert [k["flops"] for k in matmuls] == [2 * 64**3, 2 * 128**3]
    assert document["peaks"]["cpu"]["tf32"] is None and "TF32" in document["peak_derivations"]["cpu"]["tf32"]
    assert isinstance(document["peaks"]["cpu"]["fp32"], float)
    assert any("tf32" in line and "no TF32 on CPUs" in line for line in document["unmeasured"])
    steps = document["train_steps"]
    assert {s["model"] for s in steps} == {"mlp", "cnn"} and all(s["samples_per_s"] > 0 for s in steps)
    assert all(s["speedup_vs_cpu_fp32"] == 1.0 for s in steps if s["precision"] == "fp32")
    assert document["link"] == [] and any("no link" in line for line in document["unmeasured"])
    assert any("uploads nothing" in sentence for sentence in document["summary"])
    assert {s["batch_size"] for s in steps} == {256}  # what --quick gives up on a CPU, each named
    assert any("short trainings per precision on cpu: left out by --quick" in line for line in document["unmeasured"])
    busy = document["machine_busy"]
    for key in ("busy", "reasons", "other_processes_cpu_share", "steal_share", "worst_spread"):
        assert key in busy
    assert busy["busy"] == bool(busy["reasons"]) and busy["usable_cores"] >= 1
    assert document["summary"][0].startswith("figures unreliable: ") == busy["busy"]
    estimate = document["gpu_estimate"]  # no GPU was benchmarked: the planner's answer
    cnn = next(s for s in steps if s["model"] == "cnn")
    assert estimate["cpu_step_s"] == cnn["seconds_median"] and len(estimate["estimates"]) >= 2
    assert any(e["form_factor"] == "consumer" for e in estimate["estimates"])
    assert any(sentence.startswith(("No GPU here:", "No GPU was benchmarked:")) for sentence in document["summary"])
    assert document["settings"]["budget_s"] == {"per_measurement": 600.0, "training_steps_per_device": 600.0,
                                                "kernels_per_device": 600.0}


def test_summary_sentences_from_known_figures():
    from gpufeed.bench.results import BenchResult, TrainStepResult

    def step(device, precision, rate, speedup):
        return TrainStepResult("cnn", device, precision, 256, rate, 256 / rate, 256 / rate, 256 / rate, 3, speedup)

    result = BenchResult(machine=None, settings={"devices": ["cpu", "cuda:0"]},
                         train_steps=[step("cpu", "fp32", 1000.0, 1.0), step("cpu", "bf16", 2000.0, 2.0),
                                      step("cuda:0", "bf16", 41000.0, 41.0)],
                         precision_runs=[PrecisionRun("fp64", "cuda:0", 0.90, 0.3, 30.0, 100),
                                         PrecisionRun("fp32", "cuda:0", 0.91, 0.3, 10.0, 100)])
    sentences = summarise(result)
    assert sentences[0].startswith("On this machine cuda:0 trains the CNN 41.0x faster than the CPU in fp32")
    assert "cuda:0, bf16 training steps of the CNN ran 41.0x as fast as fp32" not in " ".join(sentences)
    assert any(s.startswith("On cpu, bf16 training steps of the CNN ran 2.0x as fast as fp32") for s in sentences)
    assert any(s.startswith("fp64 took 3.0x the time of fp32 for 90.0% against 91.0%") for s in sentences)


@pytest.mark.parametrize("arguments, words", [
    (["--precision", "fp8"], "unknown precision fp8"),
    (["--device", "tpu"], "unknown device"),
])
def test_bad_input(capsys, arguments, words):
    assert main(["bench", "--quick", *arguments]) == 2
    assert words in capsys.readouterr().err
