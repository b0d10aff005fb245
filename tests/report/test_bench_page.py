"""The bench page, built from a real `gpufeed bench --quick` document (CPU only) and from variants made here: a
hand-made cuda:0 added (kernels, peaks, training steps, link), and a link section with no reason to give."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
from pagecheck import PageStructure, external_urls, page_structure  # noqa: F401

from gpufeed.cli.main import main
from gpufeed.report.bench_page import bench_page, crossover_size, matrix_size, milliseconds
from gpufeed.report.document import render

FIXTURES = Path(__file__).parent / "fixtures"
def load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def with_gpu(document: dict) -> dict:
    """The CPU document with a hand-made cuda:0: fp32 overtakes the CPU at 1024 (slower at 256), bf16 at 256."""
    document = copy.deepcopy(document)
    document["settings"]["devices"] = ["cpu", "cuda:0"]
    peaks = {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4}
    sweeps = {"fp32": [0.2, 5.0, 40.0, 50.0], "tf32": [0.5, 10.0, 100.0, 150.0], "bf16": [0.9, 20.0, 300.0, 600.0]}
    for precision, values in sweeps.items():
        for n, tflops in zip((256, 1024, 4096, 8192), values, strict=True):
            document["kernels"].append({
                "op": "matmul", "device": "cuda:0", "precision": precision, "size": f"{n} x {n} x {n}",
                "flops": 2 * n**3, "seconds_median": 2 * n**3 / tflops / 1e12, "seconds_min": 2 * n**3 / tflops / 1e12,
                "seconds_max": 2 * n**3 / tflops / 1e12, "runs": 20, "tflops": tflops,
                "fraction_of_peak": tflops / peaks[precision], "tf32_matmul": precision == "tf32",
                "tf32_cudnn": precision == "tf32"})
    document["peaks"]["cuda:0"] = peaks
    document["peak_derivations"]["cuda:0"] = {name: f"NVIDIA H100 SXM5 80GB: {value} TFLOP/s dense {name} "
                                                    f"(hardware/gpus.json)" for name, value in peaks.items()}
    base = {(s["model"], s["batch_size"]): s["samples_per_s"] for s in document["train_steps"]
            if s["device"] == "cpu" and s["precision"] == "fp32"}
    for (model, batch), cpu_rate in base.items():
        for precision, rate in (("fp32", 60000.0), ("bf16", 150000.0)):
            document["train_steps"].append({
                "model": model, "device": "cuda:0", "precision": precision, "batch_size": batch, "samples_per_s": rate,
                "seconds_median": batch / rate, "seconds_min": batch / rate, "seconds_max": batch / rate, "runs": 10,
                "speedup_vs_cpu_fp32": rate / cpu_rate})
    theoretical = 16 * 128 / 130 / 8 * 16  # PCIe 4.0 x16, one direction
    for direction, pinned, rate in (("host_to_device", False, 10.2), ("host_to_device", True, 24.8),
                                    ("device_to_host", False, 9.1), ("device_to_host", True, 26.3)):
        document["link"].append({"direction": direction, "pinned": pinned, "bytes": 64 * 2**20, "gb_per_s": rate,
                                 "runs": 20, "theoretical_gb_per_s": theoretical})
    return document


def test_crossover_is_the_smallest_shared_size_where_the_gpu_is_faster():
    assert crossover_size({128: 1, 256: 2, 512: 3}, {128: 0.5, 256: 2.5, 512: 10}) == 256
    assert crossover_size({128: 1, 256: 2}, {128: 0.5, 256: 1.5}) is None  # never faster
    assert crossover_size({128: 1, 256: 2}, {512: 9.0, 1024: 20.0}) is None  # no size measured on both
    assert crossover_size({256: 0.3, 1024: 0.3}, {256: 0.2, 1024: 5.0, 4096: 40.0}) == 1024


def test_sizes_and_milliseconds_are_read_and_written_plainly():
    assert matrix_size("1024 x 1024 x 1024") == 1024
    assert milliseconds(1.3947446) == "1,395"  # no exponent
    assert milliseconds(0.0000352) == "0.0352"


def test_the_checks_themselves_can_fail():
    assert page_structure("<div><p>text</div>").errors
    assert page_structure("<figure class='chart'><p>no svg</p></figure>").charts == 0
    assert external_urls('<svg xmlns="http://www.w3.org/2000/svg"><a href="https://example.com/x">') == [
        "https://example.com/x"]


def test_cpu_fixture_page():
    document = load("bench.json")
    text = bench_page(document).render()
    structure = page_structure(text)
    assert structure.errors == []
    assert structure.charts == 3  # TFLOP/s against size, share of peak, training-step speed-ups; no link
    assert external_urls(text) == []
    words = "\n".join(structure.texts)
    for sentence in document["summary"]:
        assert sentence in words
    assert words.index(document["summary"][0]) < words.index("Matrix products")  # the summary comes first
    assert document["peak_derivations"]["cpu"]["bf16"] in words
    assert "2.29×" in words  # cnn, batch 256, bf16: 3376.2 / 1473.5 samples/s
    assert "Not measured: host-device link: the device is the CPU; there is no link to measure." in words
    assert "TF32 allowed" not in words  # no CUDA row, so no TF32 column
    assert "overtakes" not in words  # one device: no crossover to mark
    assert "10.5%" in words and "12.0%" in words  # precision runs: fp64 and fp32 accuracy


def test_page_with_a_gpu_marks_crossovers_and_draws_the_link():
    document = with_gpu(load("bench.json"))
    text = bench_page(document).render()
    structure = page_structure(text)
    assert structure.errors == []
    assert structure.charts == 4  # TFLOP/s, share of peak, speed-ups, link
    assert external_urls(text) == []
    words = "\n".join(structure.texts)
    assert "cuda:0 overtakes the CPU in fp32 at n = 1024" in words  # slower at 256 (0.2 against 0.295)
    assert "cuda:0 overtakes the CPU in bf16 at n = 256" in words
    assert "in tf32 at" not in words  # the CPU has no tf32 to compare with
    assert "102×" in words  # cnn, batch 256, bf16: 150000 / 1473.5 samples/s = 101.8
    assert "PCIe theoretical 31.51 GB/s" in words  # 16 GT/s x 128/130 / 8 x 16 lanes
    assert "79%" in words  # pinned host to device: 24.8 of 31.51 GB/s
    assert "TF32 allowed (matmul / cuDNN)" in words and "yes / yes" in words
    assert "NVIDIA H100 SXM5 80GB: 989.4 TFLOP/s dense bf16 (hardware/gpus.json)" in words


def test_empty_link_without_a_reason_says_no_gpu():
    document = load("bench.json")
    document["unmeasured"] = [line for line in document["unmeasured"] if not line.startswith("host-device link")]
    words = "\n".join(page_structure(bench_page(document).render()).texts)
    assert "no GPU was benchmarked, so there is no link to measure" in words


def test_page_is_a_pure_function_of_the_document():
    document = with_gpu(load("bench.json"))
    assert render(copy.deepcopy(document)) == render(document)


def test_report_command_writes_the_page(tmp_path):
    source = tmp_path / "bench.json"
    shutil.copy(FIXTURES / "bench.json", source)
    target = tmp_path / "page.html"
    assert main(["report", str(source), "--html", str(target)]) == 0
    assert target.read_text(encoding="utf-8") == render(load("bench.json"))


@pytest.mark.parametrize("broken", ["settings", "kernels"])
def test_a_damaged_document_is_a_one_line_error(tmp_path, broken):
    document = load("bench.json")
    document[broken] = None if broken == "settings" else [{"op": "matmul"}]
    source = tmp_path / "bench.json"
    source.write_text(json.dumps(document), encoding="utf-8")
    assert main(["report", str(source), "--html", str(tmp_path / "page.html")]) == 2
