"""FLOPs per cycle per core from the microarchitecture: lookups in `hardware/cpus.json`, a sourced table keyed on
what /proc/cpuinfo says (x86 vendor, family and model; Arm implementer, architecture and part; see cpu.py).

The instruction-set flags say which instructions a CPU has, not how many execution units run them: Zen 4 runs
AVX-512 on 256-bit units, a Xeon Silver has one 512-bit FMA unit where a Platinum has two. Each row names the
units and its sources (title, URL, date). A CPU without a row gets NA here, and its peak is bounded from its
flags instead (hardware/peak.py).

    row = find_cpu_row(probe_cpu())            # CpuRow, or NA naming the family and model that have no row
    rate = row.rate("fp32", cpu_flags)         # (flag, FLOPs per cycle per core), or None
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from gpufeed.hardware.na import NA, is_na

TOP_LEVEL_KEYS = {"schema", "updated", "notes", "cpus"}
ROW_KEYS = {"name", "vendor", "family", "models", "name_match", "flops_per_cycle", "units", "sources", "notes"}
SOURCE_KEYS = {"title", "url", "date"}
PRECISIONS = ("fp64", "fp32", "bf16", "fp16")


@dataclass(frozen=True)
class CpuSource:
    title: str
    url: str
    date: str  # YYYY-MM-DD of publication

    def __str__(self) -> str:
        return f"{self.title}, {self.url}, {self.date}"


@dataclass(frozen=True)
class CpuRow:
    """One microarchitecture (or the SKUs of one that share its execution units)."""

    name: str
    vendor: str  # "GenuineIntel", "AuthenticAMD", or an Arm implementer such as "0x41"
    family: int
    models: tuple[tuple[int, int], ...]  # inclusive ranges of the model number (Arm: the CPU part)
    name_match: str | None  # a regular expression the lower-cased model name must contain, or None
    flops_per_cycle: dict[str, tuple[tuple[str, int], ...]] = field(hash=False)  # precision -> (flag, FLOPs)
    units: str = ""  # the execution units, in words, with the arithmetic
    sources: tuple[CpuSource, ...] = ()
    notes: str = ""

    def matches(self, vendor: str, family: int, model_number: int, model_name: str) -> bool:
        if (vendor, family) != (self.vendor, self.family):
            return False
        if not any(low <= model_number <= high for low, high in self.models):
            return False
        return self.name_match is None or re.search(self.name_match, model_name.lower()) is not None

    def rate(self, precision: str, has_flag) -> tuple[str, int] | None:
        """(flag, FLOPs per cycle per core) for the fastest listed flag `has_flag(flag)` is true for."""
        return next(((flag, flops) for flag, flops in self.flops_per_cycle.get(precision, ())
                     if has_flag(flag)), None)


def _check_rates(table: Any, where: str) -> dict[str, tuple[tuple[str, int], ...]]:
    if not isinstance(table, dict) or set(table) - set(PRECISIONS):
        raise ValueError(f"{where}: flops_per_cycle must map some of {', '.join(PRECISIONS)} to {{flag: FLOPs}}")
    checked = {}
    for precision, by_flag in table.items():
        if not isinstance(by_flag, dict) or not by_flag or not all(
                isinstance(flag, str) and isinstance(flops, int) and not isinstance(flops, bool) and flops > 0
                for flag, flops in by_flag.items()):
            raise ValueError(f"{where}: flops_per_cycle.{precision} must be a non-empty {{flag: positive integer}}")
        checked[precision] = tuple(by_flag.items())
    return checked


def _check_row(row: Any, where: str) -> CpuRow:
    if not isinstance(row, dict) or set(row) != ROW_KEYS:
        keys = set(row) if isinstance(row, dict) else set()
        raise ValueError(f"{where}: missing keys {sorted(ROW_KEYS - keys)}, unknown keys {sorted(keys - ROW_KEYS)}")
    models = row["models"]
    if not isinstance(models, list) or not models or not all(
            isinstance(pair, list) and len(pair) == 2 and all(isinstance(n, int) for n in pair) and pair[0] <= pair[1]
            for pair in models):
        raise ValueError(f"{where}: models must be a non-empty list of [low, high] integer ranges")
    if not isinstance(row["family"], int) or not isinstance(row["vendor"], str):
        raise ValueError(f"{where}: vendor must be text and family an integer")
    if row["name_match"] is not None:
        re.compile(row["name_match"])
    sources = row["sources"]
    if not isinstance(sources, list) or not sources or not all(
            isinstance(s, dict) and set(s) == SOURCE_KEYS and re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(s["date"]))
            for s in sources):
        raise ValueError(f"{where}: sources must be a non-empty list of {{title, url, date YYYY-MM-DD}}")
    return CpuRow(name=row["name"], vendor=row["vendor"], family=row["family"],
                  models=tuple((low, high) for low, high in models), name_match=row["name_match"],
                  flops_per_cycle=_check_rates(row["flops_per_cycle"], where), units=row["units"],
                  sources=tuple(CpuSource(**s) for s in sources), notes=row["notes"])


@functools.lru_cache(maxsize=8)
def load_cpu_table(path: Path | str | None = None) -> tuple[CpuRow, ...]:
    """Every row of the CPU table, validated; `path` defaults to the packaged cpus.json. Raises ValueError naming
    the file and the row for a malformed table."""
    if path is None:
        label, text = "hardware/cpus.json", resources.files("gpufeed.hardware").joinpath("cpus.json").read_text()
    else:
        label, text = str(path), Path(path).read_text(encoding="utf-8")
    document = json.loads(text)
    if not isinstance(document, dict) or set(document) != TOP_LEVEL_KEYS or document["schema"] != 1:
        raise ValueError(f"{label}: the top level must be schema 1 with exactly the keys {sorted(TOP_LEVEL_KEYS)}")
    return tuple(_check_row(row, f"{label}: row {index} ({row.get('name') if isinstance(row, dict) else '?'})")
                 for index, row in enumerate(document["cpus"]))


def identity_text(cpu) -> str:
    """'AuthenticAMD family 25 model 17' (x86) or 'Arm implementer 0x41 part 0xd40', as the table is keyed."""
    if not is_na(cpu.vendor) and cpu.vendor.startswith("0x") and not is_na(cpu.model_number):
        return f"Arm implementer {cpu.vendor} part {cpu.model_number:#x}"
    return f"{cpu.vendor} family {cpu.family} model {cpu.model_number}"


def find_cpu_row(cpu, table: tuple[CpuRow, ...] | None = None) -> CpuRow | NA:
    """The first row matching a `hardware.cpu.CpuInfo`, or NA saying which identity has no row."""
    for part in (cpu.vendor, cpu.family, cpu.model_number):
        if is_na(part):
            return NA(f"CPU identity unreadable ({part.reason})")
    name = "" if is_na(cpu.model) else cpu.model
    for row in load_cpu_table() if table is None else table:
        if row.matches(cpu.vendor, cpu.family, cpu.model_number, name):
            return row
    return NA(f"no row for {identity_text(cpu)} in hardware/cpus.json")
