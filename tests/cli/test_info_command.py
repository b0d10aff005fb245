"""`gpufeed info`: JSON on standard output, the table, the pack cache, and wrong input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil
import pytest

from gpufeed.cli.main import main

KEYS = {"cpu", "memory", "disk", "accelerators", "software", "unmeasured", "cache"}


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's own cache folder (never the user's)."""
    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("GPUFEED_CACHE_LIMIT", raising=False)
    return tmp_path / "cache"


def test_json_to_standard_output_is_only_json(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["info", "--json", "-"])
    captured = capsys.readouterr()
    assert status == 0
    result = json.loads(captured.out)  # fails if the table was printed too
    assert set(result) == KEYS
    assert result["cpu"]["logical_cores"] == os.cpu_count()
    assert result["memory"]["total_bytes"] == psutil.virtual_memory().total
    assert isinstance(result["accelerators"], list) and isinstance(result["unmeasured"], list)


def test_json_file_and_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "machine.json"
    status = main(["info", "--data", str(tmp_path), "--json", str(target)])
    captured = capsys.readouterr()
    assert status == 0
    result = json.loads(target.read_text())
    assert set(result) == KEYS and result["disk"]["path"] == str(tmp_path.resolve())
    assert "CPU" in captured.out and "software" in captured.out
    if result["unmeasured"]:
        assert "NA (" in captured.out  # unreadable fields show with their reason


def test_json_into_a_missing_folder_is_wrong_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "folder" / "machine.json"
    status = main(["info", "--json", str(target)])
    captured = capsys.readouterr()
    assert status == 2
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1
    assert captured.out == "" and not target.exists()


def test_missing_data_path_is_wrong_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status = main(["info", "--data", str(tmp_path / "absent")])
    captured = capsys.readouterr()
    assert status == 2 and "does not exist" in captured.err and captured.err.count("\n") == 1


def test_help_shows_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["info", "--help"])
    assert exit_info.value.code == 0
    assert "gpufeed info --json -" in capsys.readouterr().out


def test_the_cache_is_shown_with_its_path_size_packs_and_limit(capsys: pytest.CaptureFixture[str], cache: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    cache.mkdir()
    (cache / "photos-0123456789abcdef.gpuf").write_bytes(b"x" * 1000)
    (cache / "photos-0123456789abcdef.json").write_text('{"cache_version": 1}')  # 20 bytes
    (cache / "builtin-train-64-seed0-v1.gpuf").write_bytes(b"y" * 234)
    monkeypatch.setenv("GPUFEED_CACHE_LIMIT", "20GB")
    assert main(["info", "--json", "-"]) == 0
    shown = json.loads(capsys.readouterr().out)["cache"]
    assert shown == {"path": str(cache), "exists": True, "bytes": 1254, "packs": 2, "folder_packs": 1,
                     "limit_bytes": 20 * 10**9}
    assert main(["info"]) == 0
    table = capsys.readouterr().out
    assert "pack cache" in table and "1,254 bytes" in table and "20.0 GB" in table
