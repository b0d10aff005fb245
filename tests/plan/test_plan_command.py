"""gpufeed plan end to end: the documented JSON, a user's model from file.py:factory, bad input."""

import json

import pytest

from gpufeed.cli.main import main


def plan_json(capsys, arguments):
    status = main(["plan", *arguments, "--json", "-"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    return json.loads(captured.out)


def test_json_has_the_documented_fields_and_exact_parameter_bytes(capsys):
    document = plan_json(capsys, ["--model", "mlp", "--input", "3x32x32", "--precision", "fp32",
                                  "--optimizer", "sgd", "--batch-size", "64"])
    assert document["params"] == 3072 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10 == 1_707_274
    memory = document["memory"]
    assert memory["weights_bytes"] == memory["gradients_bytes"] == 4 * 1_707_274
    assert memory["optimizer_bytes"] == 4 * 1_707_274  # SGD momentum: one fp32 buffer per parameter
    assert memory["peak_bytes"] > memory["weights_bytes"] + memory["overhead_bytes"]
    for key in ("activations_bytes", "overhead_bytes"):
        assert memory[key] > 0
    for key in ("ram_bytes", "cpu_cores", "disk_bytes", "disk_read_bytes_per_s", "psu_watts"):
        assert key in document["host"]
    assert document["flops_per_step"] > 0 and len(document["gpus"]) >= 10
    first = document["gpus"][0]
    for key in ("name", "fits", "max_batch_size", "hours", "cost"):
        assert key in first
    assert first["fits"] and first["max_batch_size"] >= 64


def test_a_users_model_from_a_file(tmp_path, capsys):
    source = tmp_path / "mymodels.py"
    source.write_text("import torch\n\ndef make(classes):\n"
                      "    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, classes))\n")
    document = plan_json(capsys, ["--model", f"{source}:make", "--input", "3x2x2", "--classes", "3",
                                  "--precision", "fp32", "--batch-size", "4"])
    assert document["params"] == 12 * 3 + 3
    assert document["memory"]["weights_bytes"] == 39 * 4


@pytest.mark.parametrize("arguments, words", [
    (["--model", "vgg"], "unknown model 'vgg'"),
    (["--model", "cnn", "--input", "3by32"], "cannot read --input"),
    (["--model", "mlp", "--optimizer", "lion"], "unknown optimizer"),
    (["--model", "missing.py:make"], "does not exist"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, arguments, words):
    assert main(["plan", *arguments]) == 2
    error = capsys.readouterr().err.strip()
    assert words in error and error.count("\n") == 0, error


def test_a_factory_that_raises(tmp_path, capsys):
    source = tmp_path / "broken.py"
    source.write_text("def make():\n    raise RuntimeError('no weights file')\n")
    assert main(["plan", "--model", f"{source}:make", "--input", "3x8x8"]) == 2
    error = capsys.readouterr().err
    assert "RuntimeError: no weights file" in error and error.strip().count("\n") == 0


def test_grad_accumulation_plans_the_accumulating_loop_and_says_so(capsys):
    arguments = ["--model", "mlp", "--input", "3x32x32", "--precision", "fp32", "--optimizer", "sgd",
                 "--batch-size", "64"]
    plain = plan_json(capsys, arguments)["memory"]
    accumulating = plan_json(capsys, [*arguments, "--grad-accumulation", "4"])
    memory = accumulating["memory"]
    assert plain["peak_bytes"] == plain["peak_bytes_by_order"]["grads_freed"]
    assert memory["peak_bytes"] == memory["peak_bytes_by_order"]["grads_live"] > plain["peak_bytes"]
    assert memory["grad_accumulation"] == 4 and "4 micro-batches" in memory["step_order"]
    assert "before each forward" in plain["step_order"]
    # four micro-batches of 64 per optimizer step: a quarter of the steps, each with four times the FLOPs
    assert accumulating["compute"]["steps_per_epoch"] == 50_000 // 256
    assert accumulating["flops_per_step"] == 4 * plan_json(capsys, arguments)["flops_per_step"]
    assert main(["plan", *arguments, "--grad-accumulation", "4"]) == 0
    assert "loop planned: gradient accumulation over 4 micro-batches" in capsys.readouterr().out


def test_grad_accumulation_below_one_is_wrong_input(capsys):
    assert main(["plan", "--model", "mlp", "--grad-accumulation", "0"]) == 2
    assert "--grad-accumulation must be positive" in capsys.readouterr().err
