"""Documents saved under older key names (train's and bench's test_accuracy / test_loss, now validation_*) still
make their page, the same page as under today's names."""

import copy
import json
from pathlib import Path

from gpufeed.report.document import current_names, load_document, render
from gpufeed.report.kinds.kind import RENAMED_KEYS

FIXTURES = Path(__file__).parent / "fixtures"


def load(command: str) -> dict:
    return json.loads((FIXTURES / f"{command}.json").read_text(encoding="utf-8"))


def test_the_train_fixture_is_an_old_name_document_and_renders():
    saved = load("train")
    assert "test_accuracy" in saved and "validation_accuracy" not in saved  # kept old on purpose: do not convert
    page = render(saved)
    assert "Validation accuracy 48.1% after 117 steps" in page
    renamed = {RENAMED_KEYS.get(key, key): value for key, value in saved.items()}
    assert render(renamed) == page


def test_an_old_name_bench_document_renders_as_its_current_name_twin():
    current = load("bench")
    assert all("validation_accuracy" in run for run in current["precision_runs"])
    old_name = {new: old for old, new in RENAMED_KEYS.items()}
    old = copy.deepcopy(current)
    old["precision_runs"] = [{old_name.get(key, key): value for key, value in run.items()}
                             for run in old["precision_runs"]]
    assert "test_loss" in old["precision_runs"][0]
    assert render(old) == render(current)


def test_current_names_copies_and_a_current_name_wins(tmp_path: Path):
    old = {"about": {"command": "train"}, "test_accuracy": 0.4, "test_loss": 1.5, "validation_loss": 1.2}
    before = copy.deepcopy(old)
    assert current_names(old) == {"about": {"command": "train"}, "validation_accuracy": 0.4, "validation_loss": 1.2}
    assert old == before
    plan = {"about": {"command": "plan"}, "test_loss": 1.0}  # no plan key was renamed
    assert current_names(plan) is plan
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(load("train")), encoding="utf-8")
    document = load_document(saved)
    assert document["validation_accuracy"] == 0.481 and "test_accuracy" not in document
