"""A resumed run keeps its precision's origin: what auto chose and why, and that it was kept."""

from __future__ import annotations

import pytest

from gpufeed.train.config import TrainConfig
from gpufeed.train.events import RunStarted
from gpufeed.train.loop import train


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path / "cache"))


def test_a_resumed_run_keeps_where_its_precision_came_from(tmp_path, cache):
    """auto on this CPU resolves by measuring (or to fp32 without bf16 instructions); the resumed run, which
    trains in what the first chose, says why it was chosen and that it was kept, not "asked for"."""
    options = dict(count=300, model="mlp", hidden=(16,), epochs=1, batch_size=50, device="cpu", precision="auto",
                   out=str(tmp_path / "run"), explicit=("count", "model", "hidden", "epochs", "batch_size",
                                                        "device", "out"))
    started = []
    train(TrainConfig(**options), on_event=started.append)
    first = next(event for event in started if isinstance(event, RunStarted))
    assert first.precision_reason.startswith("auto")
    started.clear()
    train(TrainConfig(**options | {"epochs": 2, "resume": True, "explicit": (*options["explicit"], "resume")}),
          on_event=started.append)
    again = next(event for event in started if isinstance(event, RunStarted))
    assert again.precision == first.precision
    assert again.precision_reason == f"{first.precision_reason}; kept from the resumed run"
