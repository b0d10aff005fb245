"""`gpufeed report` and the --html flags: wrong input is one line and exit 2; the page lands where it should."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpufeed import __version__
from gpufeed.cli.main import main

FIXTURES = Path(__file__).parent.parent / "report" / "fixtures"


def fixture(command: str) -> dict:
    return json.loads((FIXTURES / f"{command}.json").read_text(encoding="utf-8"))


def write_json(path: Path, value: object) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The single 'error: ...' line on standard error (and nothing else there)."""
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err
    return err


def test_truncated_json_names_the_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    text = (FIXTURES / "train.json").read_text(encoding="utf-8")
    source = tmp_path / "cut.json"
    source.write_text(text[: len(text) // 2], encoding="utf-8")
    assert main(["report", str(source)]) == 2
    err = one_error_line(capsys)
    assert str(source) in err and "not valid JSON" in err
    assert not source.with_suffix(".html").exists()


def test_document_of_a_command_without_a_page(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = write_json(tmp_path / "pack.json", {"about": {"command": "pack", "format": 1}})
    assert main(["report", str(source)]) == 2
    err = one_error_line(capsys)
    assert "`gpufeed pack`" in err and str(source) in err


def test_a_newer_format_says_to_upgrade(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    document = fixture("plan")
    document["about"].update(format=3, gpufeed="9.9")
    source = write_json(tmp_path / "future.json", document)
    assert main(["report", str(source)]) == 2
    assert one_error_line(capsys).rstrip("\n") == (
        f"error: {source} is report format 3 (gpufeed 9.9), newer than this gpufeed reads (1 and 2): upgrade "
        f"gpufeed (pip install -U gpufeed) or use the version that wrote it")


@pytest.mark.parametrize("value", ["2", 0, None, True, 2.0], ids=["string", "zero", "missing", "bool", "float"])
def test_a_format_that_no_gpufeed_wrote_says_which_are_read(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                           value: object) -> None:
    document = fixture("plan")
    if value is None:
        del document["about"]["format"]
    else:
        document["about"]["format"] = value
    source = write_json(tmp_path / "odd.json", document)
    assert main(["report", str(source)]) == 2
    err = one_error_line(capsys)
    assert f"is report format {value!r}" in err and "reads format 1 and 2:" in err and "upgrade" not in err


@pytest.mark.parametrize("version", [1, 2])
def test_formats_1_and_2_make_a_page(tmp_path: Path, version: int) -> None:
    document = fixture("doctor")  # a format-1 document: no per-step forward/optimizer/backward keys
    assert document["about"]["format"] == 1
    document["about"]["format"] = version
    source = write_json(tmp_path / "run.json", document)
    assert main(["report", str(source)]) == 0
    assert source.with_suffix(".html").stat().st_size > 0


@pytest.mark.parametrize("value", [{"steps": 3}, [1, 2, 3], "text", None, {"about": "train"}],
                         ids=["dict", "list", "string", "null", "about-not-a-dict"])
def test_json_without_an_about_block(capsys: pytest.CaptureFixture[str], tmp_path: Path, value: object) -> None:
    source = write_json(tmp_path / "plain.json", value)
    assert main(["report", str(source)]) == 2
    assert "no 'about' block" in one_error_line(capsys)


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = tmp_path / "absent.json"
    assert main(["report", str(source)]) == 2
    err = one_error_line(capsys)
    assert str(source) in err and "no such file" in err


def test_binary_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = tmp_path / "image.json"
    source.write_bytes(bytes(range(256)) * 4)  # 0x80 and above alone are not UTF-8
    assert main(["report", str(source)]) == 2
    assert str(source) in one_error_line(capsys)


def test_folder_instead_of_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["report", str(tmp_path)]) == 2
    one_error_line(capsys)


@pytest.mark.parametrize("command", ["train", "doctor"])
def test_damaged_field_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str) -> None:
    document = fixture(command)
    document["timeline"] = "not a timeline"
    source = write_json(tmp_path / "damaged.json", document)
    assert main(["report", str(source)]) == 2
    assert command in one_error_line(capsys)
    assert not source.with_suffix(".html").exists()


def test_an_error_in_a_page_is_a_bug_shown_with_its_traceback(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """An intact document whose page raises: a bug of gpufeed's, not "was it edited or damaged?" (exit 1)."""
    def misspelt(_document: dict) -> None:
        raise KeyError("validaton_accuracy")

    monkeypatch.setattr("gpufeed.report.train_page.train_page", misspelt)
    source = tmp_path / "run.json"
    shutil.copy(FIXTURES / "train.json", source)
    assert main(["report", str(source)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError: 'validaton_accuracy'" in err and "damaged" not in err
    assert err.endswith(f"\nerror: this is a bug in gpufeed {__version__}; please report it with the traceback "
                        f"above\n")
    assert not source.with_suffix(".html").exists()


def test_html_into_a_missing_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "page.html"
    assert main(["report", str(FIXTURES / "plan.json"), "--html", str(target)]) == 2
    err = one_error_line(capsys)
    assert "does not exist" in err and str(target.parent) in err
    assert not target.parent.exists()


def test_default_page_is_beside_the_document(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = tmp_path / "RUN.json"
    shutil.copy(FIXTURES / "plan.json", source)
    assert main(["report", str(source)]) == 0
    page = tmp_path / "RUN.html"
    assert page.is_file() and sorted(path.name for path in tmp_path.iterdir()) == ["RUN.html", "RUN.json"]
    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert f"page: {page}" in capsys.readouterr().out


def test_json_to_standard_output(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "page.html"
    assert main(["report", str(FIXTURES / "train.json"), "--html", str(target), "--json", "-"]) == 0
    result = json.loads(capsys.readouterr().out)  # fails if anything but the JSON was printed
    assert set(result) == {"page", "command", "created", "bytes"}
    assert result["page"] == str(target) and result["command"] == "train"
    assert result["created"] == fixture("train")["about"]["created"]
    assert result["bytes"] == target.stat().st_size


@pytest.mark.parametrize("command", ["train", "doctor", "bench", "plan", "report"])
def test_html_flag_is_offered(capsys: pytest.CaptureFixture[str], command: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert "--html PATH" in capsys.readouterr().out


def _refuse_work(*args, **kwargs):
    raise AssertionError("the command started its work before checking --html")


@pytest.mark.parametrize("command, words, work", [
    ("train", ["--epochs", "1"], "gpufeed.train.loop.train"),
    ("doctor", ["SCRIPT"], "gpufeed.doctor.observe.inject.run_script"),
    ("bench", ["--quick"], "gpufeed.bench.run.run_bench"),
    ("plan", ["--model", "mlp"], "gpufeed.plan.run.make_plan"),
])
def test_html_into_a_missing_folder_fails_before_the_work(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch, command: str,
                                                          words: list[str], work: str) -> None:
    monkeypatch.setattr(work, _refuse_work)
    script = tmp_path / "script.py"
    script.write_text("print('the script ran')\n", encoding="utf-8")
    words = [str(script) if word == "SCRIPT" else word for word in words]
    target = tmp_path / "absent" / "x.html"
    assert main([command, "--html", str(target), *words]) == 2
    err = one_error_line(capsys)
    assert f"--html {target}" in err and "does not exist" in err


@pytest.mark.parametrize("said, body", [("train", "doctor"), ("doctor", "train"), ("bench", "plan"), ("plan", "bench")])
def test_about_command_that_does_not_match_the_body(capsys: pytest.CaptureFixture[str], tmp_path: Path, said: str,
                                                    body: str) -> None:
    """A doctor result whose about.command says train: one line naming both, not 'lacks the key model'."""
    document = fixture(body)
    document["about"]["command"] = said
    source = write_json(tmp_path / "relabelled.json", document)
    assert main(["report", str(source)]) == 2
    err = one_error_line(capsys)
    assert f"says `gpufeed {said}` wrote it" in err and f"its body is a {body} result" in err
    assert not source.with_suffix(".html").exists()


def test_page_onto_its_own_document_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`--html RUN.json` (or a document saved as RUN.html, whose default page is itself) overwrote the document."""
    for name, flags in (("RUN.json", ["--html", "RUN.json"]), ("RUN.html", []), ("RUN.json", ["--json", "RUN.json"])):
        source = tmp_path / name
        shutil.copy(FIXTURES / "plan.json", source)
        words = [str(tmp_path / word) if word.startswith("RUN") else word for word in flags]
        assert main(["report", str(source), *words]) == 2
        assert "would destroy it" in one_error_line(capsys)
        assert source.read_bytes() == (FIXTURES / "plan.json").read_bytes()


def test_html_naming_a_folder_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Before: IsADirectoryError from the atomic rename, after the page (or a whole training run) was made."""
    assert main(["report", str(FIXTURES / "plan.json"), "--html", str(tmp_path)]) == 2
    assert "it is a folder" in one_error_line(capsys)


@pytest.mark.parametrize("command, words, work", [
    ("train", ["--epochs", "1"], "gpufeed.train.loop.train"),
    ("plan", ["--model", "mlp"], "gpufeed.plan.run.make_plan"),
])
def test_json_and_html_on_one_file_fail_before_the_work(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch, command: str,
                                                        words: list[str], work: str) -> None:
    monkeypatch.setattr(work, _refuse_work)
    target = tmp_path / "run.json"
    assert main([command, "--json", str(target), "--html", str(target), *words]) == 2
    assert "name the same file" in one_error_line(capsys)
    assert not target.exists()
