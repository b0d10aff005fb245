"""Hand-made results for the comparison tests: doctor, train and bench documents whose every figure is known."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).parents[1] / "report" / "fixtures"


def fixture(command: str) -> dict:
    return json.loads((FIXTURES / f"{command}.json").read_text(encoding="utf-8"))


def doctor_document(wait_ms, forward_ms=4.0, backward_ms=6.0, optimizer_ms=2.0, batch=32, getitem_share=0.9,
                    cpu="Intel(R) Xeon(R) Processor") -> dict:
    """A format-2 doctor result with one step per entry of `wait_ms` (its data wait, ms), the other parts fixed."""
    document = fixture("doctor")
    document["about"]["format"] = 2
    document["about"]["machine"]["cpu"]["model"] = cpu
    steps = []
    for index, wait in enumerate(np.asarray(wait_ms, dtype=float) / 1000.0):
        forward, backward, optimizer = forward_ms / 1000.0, backward_ms / 1000.0, optimizer_ms / 1000.0
        steps.append({"index": index, "start_s": 0.0, "wall_s": float(wait + forward + backward + optimizer),
                      "data_wait_s": float(wait), "copy_s": 0.0, "copy_bytes": 0, "copy_pageable_bytes": 0,
                      "compute_s": None, "sync_count": 0, "sync_s": 0.0, "batch_size": batch,
                      "kernel_launches": None, "forward_s": forward, "backward_s": backward,
                      "optimizer_s": optimizer,
                      "loader_split": {"batches": 1, "getitem_s": float(wait * getitem_share),
                                       "collate_s": float(wait * (1 - getitem_share)), "handover_s": None,
                                       "pin_s": None}})
    document["timeline"]["steps"] = steps
    return document


def train_document(wall_ms, wait_ms, samples=256, accuracy=0.48) -> dict:
    document = fixture("train")
    document["about"]["format"] = 2
    document["per_step"] = {"wall_s": [w / 1000.0 for w in wall_ms], "data_wait_s": [w / 1000.0 for w in wait_ms],
                            "samples": [samples] * len(wall_ms)}
    document["validation_accuracy"] = accuracy
    return document


def bench_document(scale=1.0, repeats=9, seed=0) -> dict:
    """A format-2 bench result whose every repeat is the fixture's median times `scale`, with 1% noise."""
    document = copy.deepcopy(fixture("bench"))
    document["about"]["format"] = 2
    rng = np.random.default_rng(seed)
    for entry in [*document["kernels"], *document["train_steps"]]:
        entry["seconds"] = list(entry["seconds_median"] * scale * (1 + 0.01 * rng.standard_normal(repeats)))
        entry["seconds_median"] = float(np.median(entry["seconds"]))
    return document


def write(path: Path, document: dict) -> str:
    path.write_text(json.dumps(document), encoding="utf-8")
    return str(path)
