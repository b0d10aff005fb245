"""The train page and summary say what the run used: the configuration table shows the values used (the learning
rate, where validation came from, only the model's own shape option, "1 epoch"), and the summary lists the files
written. From a real run of the command."""

from __future__ import annotations

import json

import pytest
from pagecheck import parse_page, visible

from gpufeed.cli.main import main
from gpufeed.report.document import render
from gpufeed.train.config import DEFAULT_LEARNING_RATES

TINY = ["--device", "cpu", "--count", "300", "--epochs", "1", "--batch-size", "50"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path / "cache"))


def test_the_page_shows_the_values_the_run_used(tmp_path, capsys, cache):
    out = tmp_path / "run"
    assert main(["train", *TINY, "--model", "cnn", "--width", "4", "--out", str(out),
                 "--json", str(tmp_path / "run.json")]) == 0
    printed = capsys.readouterr().out
    assert f"files in {out}: config.json, metrics.jsonl, model.safetensors, summary.json, 1 checkpoint" in printed
    document = json.loads((tmp_path / "run.json").read_text())
    assert document["config"]["learning_rate"] == DEFAULT_LEARNING_RATES["cnn"]
    # --count 300 on the built-in data: 300 train, and the test split's max(100, 300 // 5) = 100
    assert (document["train_samples"], document["validation_samples"]) == (300, 100)
    text = visible(parse_page(render(document)))
    assert "(1 epoch)" in text and "1 epochs" not in text
    assert "validation built-in: 300 train, 100 test images" in text
    assert f"learning_rate {DEFAULT_LEARNING_RATES['cnn']}" in text
    assert "hidden" not in text.split("Configuration", 1)[1] and "width 4" in text
    assert "learning_rate none" not in text and "validation none" not in text
