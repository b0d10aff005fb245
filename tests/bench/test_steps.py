"""Training-step benchmark and precision runs, on the CPU (a CUDA check skips without a GPU)."""

import math
import statistics

import pytest
import torch
import torch.nn.functional as F

from gpufeed.bench import steps as steps_module
from gpufeed.bench.steps import (
    CLASSES,
    SAMPLE_SHAPE,
    make_train_step,
    precision_runs,
    train_step_benchmark,
    unsupported_reason,
)
from gpufeed.errors import ConfigError, RunFailed
from gpufeed.train.models import build_model
from gpufeed.train.step import random_batch

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


def test_fp16_is_measured_on_the_cpu():
    """fp16 on a CPU is not refused (autocast runs it, slowly where the CPU lacks fp16 kernels): asked for, it is
    measured, not named."""
    assert unsupported_reason(CPU, "fp16") is None
    results, unmeasured = train_step_benchmark(models=("mlp",), devices=("cpu",), precisions=("fp16",),
                                               batch_sizes=(8,), repeats=1, warmup=0)
    assert unmeasured == [] and [(r.precision, r.batch_size, r.runs) for r in results] == [("fp16", 8, 1)]


def test_fp16_step_on_the_cpu_computes_in_half_and_unscales_its_gradients(monkeypatch):
    """The fp16 step with its gradient scaler, on the CPU: the first layer computes in float16, the weights stay
    float32, one scaler is made and its scale is untouched (no step skipped for an inf), and the gradients the
    optimizer used are unscaled: within 15% of float64 gradients of the same model and batch (fp16's rounding
    flips a few ReLUs: 0.05% at this seed, at most 6% over 20 seeds here), where a missing unscale would be
    65536x off and gradients added twice 100%."""
    scalers, first_layer_dtypes = [], []

    class RecordedScaler(torch.amp.GradScaler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            scalers.append(self)

    monkeypatch.setattr(torch.amp, "GradScaler", RecordedScaler)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        step, model = make_train_step("mlp", CPU, "fp16", batch_size=8)
        torch.manual_seed(0)  # the same draws as make_train_step: the model's weights, then the batch
        reference = build_model("mlp", SAMPLE_SHAPE, CLASSES).double()
        images, labels = random_batch(8, SAMPLE_SHAPE, CLASSES, CPU, torch.float32)
    assert all(torch.equal(p.double(), r) for p, r in zip(model.parameters(), reference.parameters(), strict=True))
    F.cross_entropy(reference(images.double()), labels).backward()
    before = [p.detach().clone() for p in model.parameters()]
    model.layers[0].register_forward_hook(lambda module, inputs, output: first_layer_dtypes.append(output.dtype))
    step()
    assert first_layer_dtypes == [torch.float16]
    assert len(scalers) == 1 and scalers[0].is_enabled() and scalers[0].get_scale() == 2.0 ** 16
    for parameter, expected, old in zip(model.parameters(), reference.parameters(), before, strict=True):
        assert parameter.dtype == torch.float32 and not torch.equal(parameter.detach(), old)  # AdamW stepped
        error = torch.linalg.vector_norm(parameter.grad.double() - expected.grad)
        assert error <= 0.15 * torch.linalg.vector_norm(expected.grad), (error, parameter.shape)


def _step_that_raises(error: BaseException, batch_sizes=None):
    """make_train_step, but the step it returns raises `error` (at the batch sizes given; at all when None)."""
    real = steps_module.make_train_step

    def make(model_name, device, precision, batch_size):
        step, model = real(model_name, device, precision, batch_size)
        if batch_sizes is not None and batch_size not in batch_sizes:
            return step, model

        def broken():
            step()
            raise error

        return broken, model

    return make


@pytest.mark.parametrize("error", [RuntimeError("mat1 and mat2 shapes cannot be multiplied (8x3072 and 10x512)"),
                                   NotImplementedError("\"addmm_impl_cpu_\" not implemented for 'Half'")],
                         ids=["RuntimeError", "NotImplementedError"])
def test_an_error_inside_the_timed_step_propagates(monkeypatch, error):
    monkeypatch.setattr(steps_module, "make_train_step", _step_that_raises(error))
    with pytest.raises(type(error), match="not implemented|cannot be multiplied"):
        train_step_benchmark(models=("mlp",), devices=("cpu",), precisions=("fp32",), batch_sizes=(8,), repeats=1,
                             warmup=0)


def test_only_running_out_of_memory_is_named_and_the_rest_is_measured(monkeypatch):
    monkeypatch.setattr(steps_module, "make_train_step", _step_that_raises(
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail"), batch_sizes=(16,)))
    results, unmeasured = train_step_benchmark(models=("mlp",), devices=("cpu",), precisions=("fp32",),
                                               batch_sizes=(8, 16, 4), repeats=1, warmup=0)
    assert [r.batch_size for r in results] == [8, 4]
    assert unmeasured == ["train steps, mlp on cpu fp32 batch 16: CUDA out of memory. Tried to allocate 2.00 GiB"]


def test_a_precision_run_that_fails_propagates_and_one_out_of_memory_is_named(monkeypatch):
    def diverges(config):
        raise RunFailed("the loss became nan by step 40 (checked every 10 steps); lower --lr, or train in "
                        "--precision fp32")

    monkeypatch.setattr(steps_module, "train", diverges)
    with pytest.raises(RunFailed, match="the loss became nan"):
        precision_runs("cpu", precisions=("fp32",))

    def out_of_memory(config):
        raise torch.OutOfMemoryError(f"CUDA out of memory while training {config.precision}")

    monkeypatch.setattr(steps_module, "train", out_of_memory)
    runs, unmeasured = precision_runs("cpu", precisions=("fp32", "tf32"))
    assert runs == [] and unmeasured == ["precision run, cpu fp32: CUDA out of memory while training fp32",
                                         f"precision run, cpu tf32: {unsupported_reason(CPU, 'tf32')}"]


def test_precisions_a_device_lacks_are_known_before_trying():
    assert "tensor cores" in unsupported_reason(CPU, "tf32")
    assert "float64" in unsupported_reason(torch.device("mps"), "fp64")
    assert [unsupported_reason(CPU, name) for name in ("fp64", "fp32", "bf16", "fp16")] == [None] * 4


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


@pytest.mark.slow
def test_precision_runs_fp32_and_bf16_on_cpu(tmp_path, monkeypatch):
    """Two real short trainings (2 steps each; fp64 trains in tests/train, and its convolutions are the CPU's
    slowest) and tf32 named."""
    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path / "cache"))
    runs, unmeasured = precision_runs("cpu", precisions=("fp32", "bf16", "tf32"), count=160, epochs=1)
    assert [r.precision for r in runs] == ["fp32", "bf16"]
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
    device = torch.device(results[0].device)
    lacking = {precision: unsupported_reason(device, precision) for precision in ("fp32", "tf32", "bf16", "fp16")}
    # every precision measured unless known up front to be missing on this GPU, and then named with that reason
    assert measured == {precision for precision, reason in lacking.items() if reason is None}
    assert unmeasured == [f"train steps, {device} {precision}: {reason}" for precision, reason in lacking.items()
                          if reason is not None]
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
