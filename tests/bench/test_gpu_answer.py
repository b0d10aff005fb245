"""With no GPU: the planner's roofline of the CNN step on catalog GPUs, from a fixed fake CPU measurement and a
fake catalog: which cards are shown, speed-up = CPU step / GPU step at each end of the band, and the roofline's
scaling (twice the peaks and bandwidth, half the time) checked by hand."""

from __future__ import annotations

import dataclasses

import pytest

from gpufeed.bench.gpu_answer import answer_sentence, cpu_step_to_beat, estimate_gpus, factor_text
from gpufeed.bench.results import TrainStepResult
from gpufeed.hardware.catalog import load_catalog

CPU_STEP_S = 0.5


def step(device="cpu", precision="fp32", seconds=CPU_STEP_S, model="cnn", batch=256) -> TrainStepResult:
    return TrainStepResult(model, device, precision, batch, batch / seconds, seconds, seconds, seconds, 3, None)


def card(template, name: str, scale: float, form: str, bf16: bool = True):
    """`template` with every dense rate and its bandwidth multiplied by `scale`."""
    rates = {key: None if value is None else value * scale for key, value in template.dense_tflops.items()}
    return dataclasses.replace(template, name=name, form_factor=form, bf16=bf16, dense_tflops=rates,
                               memory_bandwidth_gb_per_s=template.memory_bandwidth_gb_per_s * scale)


def fake_catalog():
    """Cards scaled from one real row: 8x, 4x, 2x, 1.5x, a consumer 1x and 0.5x, and a fast one without bf16."""
    template = next(spec for spec in load_catalog() if spec.bf16 and spec.dense_tflops["bf16"])
    return (card(template, "Fast", 8, "SXM"), card(template, "Middle", 4, "SXM"), card(template, "Third", 2, "PCIe"),
            card(template, "Fourth", 1.5, "SXM"), card(template, "Gamer", 1, "consumer"),
            card(template, "Old gamer", 0.5, "consumer"), card(template, "No bf16", 16, "PCIe", bf16=False))


def test_the_arithmetic_of_the_speed_ups():
    answer = estimate_gpus(step(), catalog=fake_catalog())
    assert [e.gpu for e in answer.estimates] == ["Fast", "Middle", "Third", "Gamer"]  # top 3 + fastest consumer
    assert answer.flops_per_step > 1e9 and answer.bytes_per_step > 1e6
    gamer = answer.estimates[-1]
    for estimate, scale in zip(answer.estimates, (8, 4, 2, 1), strict=True):
        assert estimate.step_s_low < estimate.step_s < estimate.step_s_high
        assert estimate.step_s == pytest.approx(gamer.step_s / scale)  # every operator's time scales by 1/scale
        assert estimate.step_s_low == pytest.approx(gamer.step_s_low / scale)
        assert estimate.speedup == pytest.approx(CPU_STEP_S / estimate.step_s)
        assert estimate.speedup_low == pytest.approx(CPU_STEP_S / estimate.step_s_high)
        assert estimate.speedup_high == pytest.approx(CPU_STEP_S / estimate.step_s_low)
    sentence = answer_sentence(answer)
    assert sentence.startswith("No GPU here: this CNN training step (batch 256, 500 ms on this CPU in fp32) would "
                               "run about ")
    assert (f"{factor_text(gamer.speedup)}x ({factor_text(gamer.speedup_low)}-{factor_text(gamer.speedup_high)}x) "
            f"faster on the consumer Gamer") in sentence
    assert "gpufeed plan's roofline in bf16" in sentence
    assert ("kernel launches" in sentence) == (answer.estimates[0].step_s < 1e-3)
    assert answer_sentence(dataclasses.replace(answer, gpu_present=True)).startswith("No GPU was benchmarked:")


def test_the_step_to_beat_is_the_fastest_cnn_step_at_batch_256_on_the_cpu():
    steps = [step(seconds=0.6), step(precision="bf16", seconds=0.4), step(seconds=0.01, batch=64),
             step(seconds=0.1, model="mlp"), step(device="cuda:0", seconds=0.001)]
    assert cpu_step_to_beat(steps) == steps[1]
    assert cpu_step_to_beat(steps[2:4]) is None


@pytest.mark.parametrize("value, text", [(24940.7, "25,000"), (431.0, "430"), (42.3, "42"), (3.14, "3.1")])
def test_factor_text(value, text):
    assert factor_text(value) == text


def test_the_page_shows_the_estimate_and_the_conditions():
    import json
    from pathlib import Path

    from gpufeed.bench.busy import CpuReading, judge
    from gpufeed.cli.output import to_jsonable
    from gpufeed.report.bench_page import bench_page

    document = json.loads((Path(__file__).parents[1] / "report/fixtures/bench.json").read_text(encoding="utf-8"))
    answer = estimate_gpus(step(), catalog=fake_catalog())
    busy = judge(CpuReading(0.0, 0.0, 0.0, {}), CpuReading(10.0, 20.0, 0.0, {1: (5.0, 6.0)}), 2, [])
    document["gpu_estimate"], document["machine_busy"] = to_jsonable(answer), to_jsonable(busy)
    text = bench_page(document).render()
    assert "Would a GPU help?" in text and "Gamer" in text and "this CPU (fp32, measured)" in text
    assert "Figures unreliable: other processes used 30% of the 2 usable cores" in text
