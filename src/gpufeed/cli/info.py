"""`gpufeed info`: what this machine is (CPU, RAM, the disk holding the data, accelerators, versions), and gpufeed's
pack cache (where, how big, how many packs, its limit)."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from gpufeed.cli.output import add_json_flag, console, emit_json, to_jsonable
from gpufeed.data.pack.cache import CacheSummary, cache_summary
from gpufeed.errors import GpufeedError
from gpufeed.hardware.na import is_na
from gpufeed.hardware.probe import MachineInfo, probe_machine
from gpufeed.units import bytes_text, decimal_bytes, not_available

EPILOG = """\
examples:
  gpufeed info                                  # a table of CPU, RAM, disk, accelerators and versions
  gpufeed info --data /data/imagenet            # report the disk that holds the dataset
  gpufeed info --json -                         # JSON only, on standard output
  gpufeed info --json machine.json              # the table, and the JSON saved to machine.json

Readings that cannot be taken show as "NA (reason)" and are listed under "unmeasured" in the JSON.
The cache is where gpufeed packs the built-in dataset and folders given to train ($GPUFEED_CACHE, default
~/.cache/gpufeed); $GPUFEED_CACHE_LIMIT (default 50GB) bounds it.
"""

SIMD_FIELDS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")
HIDDEN_FIELDS = {"flags", *SIMD_FIELDS, "kind", "index"}
UNIT_SUFFIXES = ("_bytes", "_mhz", "_w")  # the unit is shown with the value


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "info",
        help="show what this machine is: CPU, RAM, disk, accelerators, versions",
        description="Probe this machine: CPU (cores, SIMD, clocks), RAM, the disk holding the data,\n"
                    "accelerators (memory, compute capability, PCIe link, power limit), software versions,\n"
                    "and gpufeed's pack cache.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--data", metavar="PATH", default=".",
                        help="where the data lives; its disk is reported (default: the current folder)")
    add_json_flag(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if not Path(args.data).expanduser().exists():
        raise GpufeedError(f"--data {args.data} does not exist; "
                           "give the folder or file that holds the dataset")
    machine = probe_machine(args.data)
    cache = cache_summary()
    # before the table, so a bad --json path fails with nothing printed
    emit_json({**to_jsonable(machine), "cache": to_jsonable(cache)}, args.json)
    if args.json != "-":
        console.print(machine_table(machine, cache))
    return 0


def _format(name: str, value: Any) -> str | Text:
    if is_na(value):
        return Text(not_available(value.reason), style="dim")
    if isinstance(value, bool):
        return "yes" if value else "no"
    if name.endswith("_bytes"):
        return bytes_text(value, grouped=False)
    if name.endswith("_mhz"):
        return f"{value:.0f} MHz"
    if name.endswith("_w"):
        return f"{value:.0f} W"
    return str(value)


def _simd(cpu: Any) -> str | Text:
    values = [getattr(cpu, name) for name in SIMD_FIELDS]
    missing = next((value for value in values if is_na(value)), None)
    if missing is not None:
        return _format("simd", missing)
    present = [name for name, value in zip(SIMD_FIELDS, values, strict=True) if value]
    return " ".join(present) if present else "none of " + ", ".join(SIMD_FIELDS)


def _rows(part: Any) -> Iterator[tuple[str, str | Text]]:
    """(label, value) for each field of a dataclass, units taken from the field name's suffix."""
    for field in dataclasses.fields(part):
        if field.name not in HIDDEN_FIELDS:
            label = field.name
            for unit in UNIT_SUFFIXES:
                label = label.removesuffix(unit)
            yield label.replace("_", " "), _format(field.name, getattr(part, field.name))


def machine_table(machine: MachineInfo, cache: CacheSummary | None = None) -> Table:
    """The probe as one two-column table, a section per part; the pack cache last."""
    table = Table(title="gpufeed info", show_header=False, title_justify="left")
    table.add_column("item", style="bold")
    table.add_column("value")
    table.add_row(Text("CPU", style="bold cyan"), "")
    for label, value in _rows(machine.cpu):
        table.add_row(f"  {label}", value)
    table.add_row("  simd", _simd(machine.cpu))
    for title, part in (("memory", machine.memory), ("disk", machine.disk)):
        table.add_section()
        table.add_row(Text(title, style="bold cyan"), "")
        for label, value in _rows(part):
            table.add_row(f"  {label}", value)
    table.add_section()
    table.add_row(Text("accelerators", style="bold cyan"), "" if machine.accelerators else "none")
    for note in (line for line in machine.unmeasured if line.startswith("accelerators.")):
        table.add_row("", Text(note.split(": ", 1)[1], style="dim"))
    for device in machine.accelerators:
        table.add_row(f"  {device.kind}:{device.index}", "")
        for label, value in _rows(device):
            table.add_row(f"    {label}", value)
    table.add_section()
    table.add_row(Text("software", style="bold cyan"), "")
    for label, value in _rows(machine.software):
        table.add_row(f"  {label}", value)
    if cache is not None:
        _cache_rows(table, cache)
    return table


def _cache_rows(table: Table, cache: CacheSummary) -> None:
    table.add_section()
    table.add_row(Text("pack cache", style="bold cyan"), "")
    table.add_row("  path", cache.path + ("" if cache.exists else " (not made yet)"))
    table.add_row("  size", f"{decimal_bytes(cache.bytes)} ({cache.bytes:,} bytes)")
    table.add_row("  packs", f"{cache.packs} ({cache.folder_packs} of folders)")
    table.add_row("  limit", f"{decimal_bytes(cache.limit_bytes)} (GPUFEED_CACHE_LIMIT; the least recently used "
                             f"packs of folders are removed past it)")
