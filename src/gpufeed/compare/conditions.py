"""Whether two results are comparable at all: what differs between them besides the change under test, from
their `about` blocks (machine, versions, command line) and their settings (each kind's, compare/kinds.py). Listed
before the figures; a different machine (CPU model, core count, GPUs) also goes into the headline."""

from __future__ import annotations

from gpufeed.compare.comparable import as_text
from gpufeed.compare.kinds import COMPARABLE

# flags that choose where results go, not what runs: left out when command lines are compared
OUTPUT_FLAGS = ("--json", "--html", "--markdown", "--out")


def machine_of(document: dict) -> dict[str, str]:
    """What identifies a machine and its software in a result, in words."""
    about = document.get("about") or {}
    machine = about.get("machine") or {}
    cpu, software = machine.get("cpu") or {}, machine.get("software") or {}
    gpus = [accelerator.get("name", "?") for accelerator in machine.get("accelerators") or []]
    return {"CPU": as_text(cpu.get("model")), "cores": as_text(cpu.get("logical_cores")),
            "GPUs": ", ".join(gpus) or "none", "torch": as_text(software.get("torch")),
            "CUDA": as_text(software.get("cuda_runtime")), "gpufeed": as_text(about.get("gpufeed"))}


MACHINE_KEYS = ("CPU", "cores", "GPUs")


def command_words(document: dict) -> list[str]:
    """The command line that made a result, without its output flags and their values."""
    words = list((document.get("about") or {}).get("argv") or [])
    kept, skip = [], False
    for word in words:
        if skip:
            skip = False
            continue
        if word in OUTPUT_FLAGS:
            skip = True
            continue
        if any(word.startswith(flag + "=") for flag in OUTPUT_FLAGS):
            continue
        kept.append(word)
    return kept


def differences(command: str, base: dict, new: dict, command_lines: bool = True) -> tuple[list[str], bool]:
    """Lines naming what differs (machine first), and whether the machines differ. `command_lines=False`: the
    command lines differ by design (the A/B mode runs two commands) and are not listed."""
    lines = []
    first, second = machine_of(base), machine_of(new)
    for key in first:
        if first[key] != second[key]:
            lines.append(f"{key}: {first[key]} (BASE) vs {second[key]} (NEW)")
    if first["gpufeed"] != second["gpufeed"]:
        lines.append("gpufeed versions differ: its rules may grade the same run differently, so the measured "
                     "parts are compared, not the grades")
    settings = COMPARABLE[command].settings
    base_settings, new_settings = settings(base), settings(new)
    for key in dict.fromkeys([*base_settings, *new_settings]):
        one, other = base_settings.get(key, "none"), new_settings.get(key, "none")
        if one != other:
            lines.append(f"{key}: {one} (BASE) vs {other} (NEW)")
    if command_lines:
        one, other = command_words(base), command_words(new)
        if one != other:
            lines.append(f"command: `{' '.join(one)}` (BASE) vs `{' '.join(other)}` (NEW)")
    return lines, any(first[key] != second[key] for key in MACHINE_KEYS)
