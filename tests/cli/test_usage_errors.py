"""Usage errors: one line on standard error naming the command and its --help, exit status 2, for every command."""

from __future__ import annotations

import pytest

from gpufeed.cli import main as main_module
from gpufeed.cli.main import COMMANDS, main

# One wrong use of each command, caught by argparse, and a piece of what the error must say.
BAD_VALUES = [
    ("info", ["--data"], "argument --data: expected one argument"),
    ("pack", ["--count", "x"], "argument --count: invalid int value: 'x'"),
    ("train", ["--epochs", "x"], "argument --epochs: invalid int value: 'x'"),
    ("bench", ["--quick", "extra"], "unrecognized arguments: extra"),
    ("plan", [], "one of the arguments --model --list-models is required"),
    ("doctor", ["--steps", "0"], "argument --steps: must be at least 1, got 0"),
    ("report", [], "the following arguments are required: RUN.json"),
    ("compare", ["base.json"], "the following arguments are required: NEW.json"),
    ("compare", ["--fail-if-slower", "x", "a.json", "b.json"],
     "argument --fail-if-slower: must be a percentage such as 10 (0 to 999), got x"),
]


def assert_one_line_usage_error(status: int, captured: pytest.CaptureResult[str], prog: str) -> str:
    assert status == 2
    assert captured.out == ""
    assert captured.err.endswith("\n") and captured.err.count("\n") == 1, captured.err  # no usage block
    line = captured.err.rstrip("\n")
    assert line.startswith(f"error: {prog}: ") and line.endswith(f"; see {prog} --help")
    return line


@pytest.mark.parametrize(("command", "words", "says"), BAD_VALUES, ids=[row[0] for row in BAD_VALUES])
def test_a_wrong_value_is_one_line(command: str, words: list[str], says: str,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    status = main([command, *words])
    line = assert_one_line_usage_error(status, capsys.readouterr(), f"gpufeed {command}")
    assert says in line


def test_the_exact_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--epochs", "x"]) == 2
    expected = "error: gpufeed train: argument --epochs: invalid int value: 'x'; see gpufeed train --help\n"
    assert capsys.readouterr().err == expected


# What a command requires, so that the unknown flag is the only thing wrong.
REQUIRED = {"plan": ["--model", "mlp"], "report": ["run.json"], "compare": ["base.json", "new.json"]}


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unknown_flag_names_its_command(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    status = main([command, *REQUIRED.get(command, []), "--no-such-flag"])  # argparse leaves it to the top parser
    line = assert_one_line_usage_error(status, capsys.readouterr(), f"gpufeed {command}")
    assert "unrecognized arguments: --no-such-flag" in line


def test_an_unknown_command_names_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["frobnicate"])
    line = assert_one_line_usage_error(status, capsys.readouterr(), "gpufeed")
    assert "'frobnicate'" in line and all(f"'{command}'" in line for command in COMMANDS)


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_is_the_whole_usage_and_exit_status_0(command: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    words = ["--help"] if command is None else [command, "--help"]
    prog = "gpufeed" if command is None else f"gpufeed {command}"
    with pytest.raises(SystemExit) as exit_info:
        main(words)
    captured = capsys.readouterr()
    assert exit_info.value.code == 0 and captured.err == ""
    assert captured.out.startswith(f"usage: {prog} ") and "-h, --help" in captured.out
    assert captured.out.count("\n") > 3


def test_no_command_prints_help_and_exit_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert capsys.readouterr().out.startswith("usage: gpufeed ")


def test_a_missing_command_module_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(main_module, "COMMANDS", (*COMMANDS, "no_such_command"))
    with pytest.raises(ModuleNotFoundError, match="gpufeed.cli.no_such_command"):
        main_module.build_parser()
