"""gpufeed train on the CPU: it learns, MLP depths, OOM back-off, bad input, NaN, and the resolved config."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from gpufeed.cli.main import main
from gpufeed.errors import ConfigError, RunFailed
from gpufeed.train.batch_size import find_batch_size
from gpufeed.train.config import TrainConfig
from gpufeed.train.loop import learning_rate_at, train


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def quick(**options) -> TrainConfig:
    values = dict(count=2000, epochs=2, batch_size=64, device="cpu", precision="fp32", log_every_steps=10)
    values.update(options)
    return TrainConfig(**values)


@pytest.mark.slow
def test_cnn_learns_the_builtin_data_and_beats_a_linear_model(tmp_path):
    # Threshold: the linear classifier (hidden=()) stays near chance on this data (colour carries no label);
    # the narrow CNN reaches well over half right within 3 epochs of 2000 images (measured 0.91-0.95 here).
    cnn = train(quick(model="cnn", width=16, epochs=3, out=str(tmp_path / "run")))
    linear = train(quick(model="mlp", hidden=(), epochs=3))
    assert cnn.validation_accuracy >= 0.5, cnn
    assert cnn.validation_accuracy >= linear.validation_accuracy + 0.3
    assert linear.validation_accuracy < 0.3
    files = {path.name for path in (tmp_path / "run").iterdir()}
    assert {"config.json", "metrics.jsonl", "model.safetensors", "summary.json", "checkpoints"} <= files
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) >= cnn.steps // 10 and json.loads(lines[-1])["step"] == cnn.steps
    assert cnn.steps == 3 * (2000 // 64) and cnn.device == "cpu" and cnn.device_busy_fraction is None
    assert 0 <= cnn.data_wait_fraction < 1 and cnn.samples_per_s > 0


@pytest.mark.parametrize("hidden", [(64,), (64, 32), (64, 32, 16)])
def test_mlp_trains_with_one_two_three_hidden_layers(hidden, tmp_path):
    """The trained model's own weights (its saved model.safetensors): one Linear per hidden size then the
    classifier, each (out, in) shape and the parameter count by hand from 3x32x32 inputs and 10 classes."""
    result = train(quick(model="mlp", hidden=hidden, count=640, epochs=1, max_steps=5, learning_rate=3e-3,
                         out=str(tmp_path / "run")))
    saved = load_file(tmp_path / "run" / "model.safetensors")  # {"layers.0.weight": tensor, ...}
    widths = [3 * 32 * 32, *hidden, 10]
    shapes = list(zip(widths[1:], widths[:-1], strict=True))  # (out, in) of each Linear, in order
    layers = sorted({name.rsplit(".", 1)[0] for name in saved}, key=lambda layer: int(layer.rsplit(".", 1)[1]))
    assert len(saved) == 2 * len(layers)  # a weight and a bias each, nothing else
    assert [tuple(saved[f"{layer}.weight"].shape) for layer in layers] == shapes
    assert [tuple(saved[f"{layer}.bias"].shape) for layer in layers] == [(outputs,) for outputs, _ in shapes]
    assert result.parameters == sum(outputs * inputs + outputs for outputs, inputs in shapes)
    assert np.isfinite(result.validation_loss) and result.steps == 5


@pytest.mark.slow
def test_mlp_loss_goes_down():
    records = []
    train(quick(model="mlp", hidden=(128,), epochs=2, log_every_steps=5, learning_rate=2e-3),
          on_event=records.append)
    losses = [record.loss for record in records if hasattr(record, "loss")]
    assert losses[-1] < losses[0] - 0.05, losses


def test_learning_rate_schedule_by_hand():
    assert learning_rate_at(0, 100, 1.0, 0.1) == pytest.approx(0.1)
    assert learning_rate_at(9, 100, 1.0, 0.1) == pytest.approx(1.0)
    assert learning_rate_at(55, 100, 1.0, 0.1) == pytest.approx(0.5)
    assert learning_rate_at(100, 100, 1.0, 0.1) == 0.0


def test_batch_size_backs_off_on_a_faked_out_of_memory():
    tried = []

    def try_step(batch):
        tried.append(batch)
        if batch > 100:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    batch, failed = find_batch_size(try_step, start=1024)
    assert batch == 64 and failed == [1024, 512, 256, 128] and tried == [1024, 512, 256, 128, 64]


def test_batch_size_other_errors_propagate_and_nothing_fits():
    def broken(batch):
        raise ValueError("shape mismatch")

    with pytest.raises(ValueError):
        find_batch_size(broken)
    with pytest.raises(RunFailed, match="does not fit"):
        find_batch_size(lambda batch: (_ for _ in ()).throw(MemoryError()), start=4)


def test_auto_batch_size_through_the_trainer(monkeypatch):
    from gpufeed.train import setup

    def fake_step(model, precision, device, batch, *args, **kwargs):
        if batch > 200:
            raise torch.OutOfMemoryError("out of memory")
        return 0.0

    monkeypatch.setattr(setup, "time_training_step", fake_step)
    result = train(quick(model="mlp", hidden=(32,), batch_size="auto", max_steps=2, count=3000))  # 23 steps at 128
    assert result.batch_size == 128


def test_nan_loss_stops_with_the_step(capsys):
    status = main(["train", "--count", "600", "--model", "mlp", "--hidden", "32", "--lr", "1e30",
                   "--device", "cpu", "--precision", "fp32", "--batch-size", "32", "--epochs", "2"])
    error = capsys.readouterr().err
    assert status == 1 and "the loss became" in error and "at step" in error


@pytest.mark.parametrize("arguments, words", [
    (["--count", "300", "--model", "vgg"], "unknown model 'vgg'"),
    (["--count", "300", "--precision", "fp8"], "unknown precision"),
    (["--count", "300", "--device", "tpu"], "unknown device"),
    (["--data", "pyproject.toml"], "not a gpufeed packed dataset"),
    (["--data", "missing.gpuf"], "does not exist"),
    (["--data", "pyproject.toml", "--count", "10"], "--count applies to the built-in dataset only"),
    (["--count", "300", "--resume"], "--resume needs --out"),
    (["--count", "300", "--batch-size", "400", "--device", "cpu", "--precision", "fp32"], "lower --batch-size"),
])
def test_bad_input_exits_2_with_one_line(capsys, arguments, words):
    status = main(["train", "--epochs", "1", *arguments])
    error = capsys.readouterr().err.strip()
    assert status == 2 and words in error and error.count("\n") == 0, error


def test_cuda_on_a_machine_without_it_suggests_cpu(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["train", "--count", "300", "--device", "cuda"]) == 2
    assert "--device cpu" in capsys.readouterr().err


def test_zero_batch_size_is_refused_by_the_parser(capsys):
    assert main(["train", "--batch-size", "0"]) == 2
    error = capsys.readouterr().err
    assert "positive" in error and len(error.strip().splitlines()) == 1


def test_unknown_config_keys_are_an_error():
    with pytest.raises(ConfigError, match="unknown configuration keys colour"):
        TrainConfig.from_dict({"colour": "red"})


def test_json_summary_has_the_documented_fields(capsys):
    status = main(["train", "--count", "300", "--model", "mlp", "--hidden", "16", "--epochs", "1",
                   "--batch-size", "50", "--device", "cpu", "--precision", "fp32", "--json", "-"])
    summary = json.loads(capsys.readouterr().out)
    assert status == 0
    for key in ("validation_accuracy", "validation_loss", "epochs", "samples_per_s", "data_wait_fraction",
                "device_busy_fraction", "peak_memory_bytes", "device", "precision", "world_size", "seconds"):
        assert key in summary
    assert "test_accuracy" not in summary and "test_loss" not in summary
    assert summary["steps"] == 300 // 50 and summary["world_size"] == 1 and summary["precision"] == "fp32"


def test_fp64_trains_and_reports_its_precision(tmp_path):
    from safetensors.torch import load_file

    result = train(quick(model="mlp", hidden=(16,), precision="fp64", max_steps=5, out=str(tmp_path / "run")))
    weights = load_file(str(tmp_path / "run" / "model.safetensors"))
    assert result.precision == "fp64" and np.isfinite(result.validation_loss)
    assert {tensor.dtype for tensor in weights.values()} == {torch.float64}


def test_cpu_run_names_what_it_could_not_measure():
    result = train(quick(model="mlp", hidden=(16,), max_steps=3))
    assert result.device_busy_fraction is None and result.gpu_utilization_percent is None
    assert any("device busy share" in line for line in result.unmeasured)
