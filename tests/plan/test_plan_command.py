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
    for key in ("name", "fits", "max_batch_size", "hours", "cost", "precision", "step_s", "samples_per_s", "mfu",
                "rent_usd_per_hour", "cost_rent_usd", "buy_gpus", "buy_system"):
        assert key in first
    for key in ("bytes_per_step", "compute_efficiency", "memory_efficiency", "efficiency_low", "efficiency_high",
                "efficiency_source", "method"):
        assert key in document["compute"]
    for key in ("ram_cache_bytes", "ram_cache_reason", "system", "system_gpus", "systems", "reference_system"):
        assert key in document["host"]
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
    (["--model", "mlp", "--source-gib", "-1"], "--source-gib must not be negative"),
    (["--model", "mlp", "--precision", "int8"], "unknown precision 'int8'"),
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


MLP = ["--model", "mlp", "--input", "3x32x32", "--optimizer", "sgd", "--batch-size", "64"]


def test_gpu_4090_matches_loosely_and_its_host_is_a_workstation_with_24_gib_of_ram_at_least(capsys):
    document = plan_json(capsys, [*MLP, "--gpu", "4090", "--source-gib", "2"])
    assert document["host_gpu"] == "NVIDIA GeForce RTX 4090"
    host = document["host"]
    assert host["system"] == "a workstation with 1 card" and host["system_gpus"] == 1
    assert host["ram_minimum_bytes"] == 24 * 2**30 and host["ram_bytes"] == 48 * 2**30  # the GPU's 24 GiB, twice
    # the page cache is a choice apart: 48 GiB + 50,000 x 3,072 bytes (0.14 GiB) -> 64 GiB
    assert host["ram_cache_bytes"] == 64 * 2**30 and host["ram_cache_reason"].startswith("a choice")
    # disk in GiB: the 2 GiB of source files + the packed dataset + 4 checkpoints
    dataset = 50_000 * 3072
    assert host["disk_bytes"] == 2 * 2**30 + dataset + 4 * 1_707_274 * 8
    assert "source files 2.00 GiB + packed dataset 0.14 GiB" in host["disk_reason"]
    assert "GB " not in host["disk_reason"] and "MiB/s" in host["disk_reason"]


@pytest.mark.parametrize("name, words", [
    ("a100", "matches 4 catalog GPUs: NVIDIA A100 SXM4 80GB; NVIDIA A100 SXM4 40GB"),
    ("RTX 5090", "not a GPU in the catalog (hardware/gpus.json); close names: NVIDIA GeForce RTX 4090"),
])
def test_gpu_that_cannot_be_matched_lists_the_close_names(capsys, name, words):
    assert main(["plan", *MLP, "--gpu", name]) == 2
    error = capsys.readouterr().err.strip()
    assert f"--gpu {name!r}" in error and words in error and error.count("\n") == 0, error


def test_b200_is_bought_as_an_eight_gpu_server(capsys):
    document = plan_json(capsys, [*MLP, "--gpu", "b200"])
    host = document["host"]
    assert host["system_gpus"] == 8 and "8-GPU SXM baseboard server" in host["system"]
    # a one-GPU job on the board: power for that GPU, 1,000 W + 2 CPUs x 350 W + platform 0.7 x 1,000 W = 2,400 W,
    # on one 3,000 W supply; RAM for its 180 GiB: at least 192 GiB, ideally 384 GiB
    assert host["gpus_used"] == 1 and host["psu_watts"] == 3_000 and "2,400 W" in host["psu_arithmetic"]
    assert "the board holds 8" not in host["psu_arithmetic"] and "the system holds 8" in host["psu_arithmetic"]
    assert (host["ram_minimum_bytes"], host["ram_bytes"]) == (192 * 2**30, 384 * 2**30)
    assert "NVIDIA DGX B200" in host["reference_system"]
    b200 = next(gpu for gpu in document["gpus"] if gpu["name"] == "NVIDIA B200 (HGX)")
    assert b200["buy_gpus"] == 8 and b200["cost_buy_usd"] == 8 * 35_000
    # no --source-gib: the source files are counted as large as the packed dataset, and the plan says so
    assert "source files 0.14 GiB + packed dataset 0.14 GiB" in host["disk_reason"]
    assert any(line.startswith("source files: not given (--source-gib)") for line in document["unmeasured"])


def test_bf16_falls_back_to_fp16_on_t4_and_v100_and_rent_is_per_hour_and_per_job(capsys):
    document = plan_json(capsys, [*MLP, "--precision", "bf16"])
    rows = {gpu["name"]: gpu for gpu in document["gpus"]}
    for name in ("NVIDIA T4", "NVIDIA V100 SXM2 16GB", "NVIDIA V100 PCIe 32GB"):
        assert rows[name]["precision"] == "fp16" and rows[name]["hours"] is not None, name
        assert "gradient scaler" in rows[name]["notes"]
    assert rows["NVIDIA A100 SXM4 80GB"]["precision"] == "bf16"
    t4 = rows["NVIDIA T4"]
    assert t4["rent_usd_per_hour"] == 0.35 and t4["cost_rent_usd"] == pytest.approx(0.35 * t4["hours"])
    assert "/h, " in document["recommendation"] and "for the job" in document["recommendation"]
    assert main(["plan", *MLP, "--precision", "bf16"]) == 0
    shown = capsys.readouterr().out.splitlines()
    header = next(index for index, line in enumerate(shown) if line.split()[:2] == ["GPU", "fits"])
    table = shown[header:header + len(document["gpus"]) + 2]
    assert "rent $" in table[0] and all(len(line) <= 100 for line in table)  # the table fits 100 columns
    row = next(line for line in table if line.split()[0] == "T4")
    assert f"{t4['cost_rent_usd']:.2f}" in row
    mark = row.split()[-1]  # its note as a footnote: [n]
    assert any(line.startswith(f"{mark} no bf16 on Turing") for line in shown)


def test_precision_tf32(capsys):
    document = plan_json(capsys, [*MLP, "--precision", "tf32"])
    rows = {gpu["name"]: gpu for gpu in document["gpus"]}
    assert document["request"]["precision"] == "tf32" and rows["NVIDIA A100 SXM4 80GB"]["precision"] == "tf32"
    assert rows["NVIDIA V100 SXM2 16GB"]["precision"] == "fp32" and "no TF32" in rows["NVIDIA V100 SXM2 16GB"]["notes"]
    fp32 = {gpu["name"]: gpu for gpu in plan_json(capsys, [*MLP, "--precision", "fp32"])["gpus"]}
    # the MLP's matrix products: FP32 at 19.5 TFLOP/s under fp32, TF32 at 156 under tf32 on an A100
    assert rows["NVIDIA A100 SXM4 80GB"]["step_s"] < fp32["NVIDIA A100 SXM4 80GB"]["step_s"]
    assert document["memory"]["peak_bytes"] == plan_json(capsys, [*MLP, "--precision", "fp32"])["memory"]["peak_bytes"]
