"""Training-step benchmark and precision runs, on the CPU (a CUDA check skips without a GPU)."""

import math
import statistics

import pytest
import torch

from gpufeed.bench.steps import make_train_step, precision_runs, train_step_benchmark
from gpufeed.errors import ConfigError

CPU = torch.device("cpu")


def test_step_benchmark_cpu_fp32_and_bf16():
    results, unmeasured = train_step_benchmark(models=("mlp",), devices=("cpu",), precisions=("fp32", "bf16"),
                                               batch_sizes=(32,), repeats=2, warmup=1)
    assert unmeasured == []
    by_precision = {r.precision: r for r in results}
    assert sorted(by_precision) == ["bf16", "fp32"]
    for result in results:
        assert result.model == "mlp" and result.device == "cpu" and result.batch_size == 32 and result.runs == 2
        assert result.samples_per_s > 0
        assert result.samples_per_s == 32 / result.seconds_median
        assert 0 < result.seconds_min <= result.seconds_median <= result.seconds_max
        assert len(result.seconds) == result.runs  # every repeat, the figures computed from them
        assert (statistics.median(result.seconds), min(result.seconds), max(result.seconds)) == (
            result.seconds_median, result.seconds_min, result.seconds_max)
    fp32, bf16 = by_precision["fp32"], by_precision["bf16"]
    assert fp32.speedup_vs_cpu_fp32 == 1.0
    assert bf16.speedup_vs_cpu_fp32 == pytest.approx(bf16.samples_per_s / fp32.samples_per_s, rel=1e-12)


def test_speedup_is_none_without_a_cpu_fp32_figure_for_that_model_and_batch():
    results, _ = train_step_benchmark(models=("mlp",), devices=("cpu",), precisions=("fp64",), batch_sizes=(8,),
                                      repeats=1, warmup=0)
    assert [r.precision for r in results] == ["fp64"] and results[0].speedup_vs_cpu_fp32 is None


def test_fp64_step_trains_a_float64_model():
    step, model = make_train_step("mlp", CPU, "fp64", batch_size=8)
    parameters = list(model.parameters())
    assert parameters and all(p.dtype == torch.float64 for p in parameters)
    before = [p.detach().clone() for p in parameters]
    step()
    assert all(p.grad is not None and p.grad.dtype == torch.float64 for p in parameters)
    assert any(not torch.equal(b, p) for b, p in zip(before, parameters, strict=True))  # AdamW moved the weights


def test_bf16_step_keeps_float32_weights_under_autocast():
    step, model = make_train_step("cnn", CPU, "bf16", batch_size=4)
    step()
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_unknown_precision_is_a_config_error():
    with pytest.raises(ConfigError, match="fp8"):
        train_step_benchmark(models=("mlp",), devices=("cpu",), precisions=("fp8",), batch_sizes=(8,))
    with pytest.raises(ConfigError, match="fp8"):
        precision_runs("cpu", precisions=("fp8",))
    with pytest.raises(ConfigError, match="fp8"):
        make_train_step("mlp", CPU, "fp8", batch_size=8)


def test_tf32_on_the_cpu_and_a_missing_device_are_unmeasured():
    devices = ("cpu",) if torch.cuda.is_available() else ("cpu", "cuda")
    results, unmeasured = train_step_benchmark(models=("mlp",), devices=devices, precisions=("tf32",),
                                               batch_sizes=(8,), repeats=1, warmup=0)
    assert results == []
    assert any("cpu tf32" in line and "tensor cores" in line for line in unmeasured)
    if not torch.cuda.is_available():
        assert any(line.startswith("train steps on cuda:") for line in unmeasured)


def test_precision_runs_fp32_and_fp64_on_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path / "cache"))
    runs, unmeasured = precision_runs("cpu", precisions=("fp32", "fp64", "tf32"), count=600, epochs=1)
    assert [r.precision for r in runs] == ["fp32", "fp64"]
    assert len(unmeasured) == 1 and "tf32" in unmeasured[0]
    for run in runs:
        assert run.device == "cpu" and run.steps > 0 and run.seconds > 0
        assert math.isfinite(run.validation_loss) and 0.0 <= run.validation_accuracy <= 1.0
    assert runs[0].steps == runs[1].steps


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_step_benchmark_on_cuda_restores_tf32_flags():
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    results, unmeasured = train_step_benchmark(models=("cnn",), devices=("cuda",),
                                               precisions=("fp32", "tf32", "bf16", "fp16"), batch_sizes=(64,),
                                               repeats=3, warmup=2)
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == saved
    measured = {r.precision for r in results}
    assert "fp32" in measured
    for precision in ("tf32", "bf16", "fp16"):  # measured, or named with the reason
        assert precision in measured or any(f" {precision}:" in line for line in unmeasured)
    for result in results:
        assert result.device.startswith("cuda") and result.samples_per_s > 0 and result.runs == 3
        assert result.speedup_vs_cpu_fp32 is None  # no CPU figure was asked for


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_step_benchmark_cuda_speedup_against_cpu_fp32():
    results, _ = train_step_benchmark(models=("mlp",), devices=("cpu", "cuda"), precisions=("fp32",),
                                      batch_sizes=(64,), repeats=3, warmup=2)
    cpu, cuda = sorted(results, key=lambda r: r.device)
    assert cpu.device == "cpu" and cuda.device.startswith("cuda")
    assert cuda.speedup_vs_cpu_fp32 == pytest.approx(cuda.samples_per_s / cpu.samples_per_s, rel=1e-12)
