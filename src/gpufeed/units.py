"""Figures as a person reads them: bytes, rates, durations, money, shares and plain numbers, and one spelling of
"not available".

The terminal (`cli/`) and the pages (`report/`) print through these, so a figure reads the same in both. A figure
that is not available is None here and prints as NA (nvitop's spelling; hardware/na.py's reading prints as
`NA (reason)`). Binary units (KiB, MiB, GiB) are powers of 1024; decimal ones (kB, MB, GB) and GB/s powers of 1000.
Nothing here imports the rest of gpufeed.

    bytes_text(1536 * 2**20)                      # '1.5 GiB'
    bytes_text(peak, "MiB", digits=1)             # '1,234.5 MiB'
    fixed(samples_per_s, 0, "samples/s")          # '1,979 samples/s'
    flops_text(9.89e14, "FLOP/s")                 # '989 TFLOP/s'
    duration_text(0.25)                           # '15 min'
"""

from __future__ import annotations

import math

NA = "NA"

BYTE_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "kB": 10**3, "MB": 10**6, "GB": 10**9}
GIB = BYTE_UNITS["GiB"]


def not_available(reason: str | None = None) -> str:
    """NA, or `NA (reason)` when the reason is known."""
    return NA if reason is None else f"{NA} ({reason})"


def plain_number(value: float | None, digits: int = 3) -> str:
    """An int with thousands separators (12,345); a float to `digits` significant digits (3.14159 -> '3.14'),
    whole from 1,000 up (1234.6 -> '1,235'), with an exponent from 1e5 up or under 1e-3 (123456.0 -> '1.23e+05');
    NA for None and NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NA
    if isinstance(value, int):
        return f"{value:,}"
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.{digits}g}"
    return f"{value:,.{digits}g}" if abs(value) < 1000 else f"{value:,.0f}"


def flops_text(value: float | None, unit: str = "FLOP") -> str:
    """FLOPs (or with `unit` "FLOP/s" a rate) with a decimal prefix at 3 significant digits: 24576 -> '24.6 kFLOP',
    1.2e9 -> '1.2 GFLOP', 9.89e14 -> '989 TFLOP/s' with unit 'FLOP/s'; under 1,000 as a whole number; NA for None."""
    if value is None:
        return NA
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.0f} {unit}"


def fixed(value: float | None, digits: int = 0, unit: str = "", grouped: bool = True) -> str:
    """`value` with `digits` decimals, thousands separated unless `grouped` is False, then its unit when given: a
    rate as `fixed(1979.4, 0, "samples/s")` -> '1,979 samples/s', `fixed(12.34, 1, "GB/s")` -> '12.3 GB/s'; NA for
    None."""
    if value is None:
        return NA
    text = f"{value:{',' if grouped else ''}.{digits}f}"
    return f"{text} {unit}" if unit else text


def rate_text(value: float | None, unit: str = "") -> str:
    """A rate whole with thousands separators from 100 up ('1,979'), else to 3 significant digits ('0.0412',
    '12.5'), so a rate under 1 is not printed as 0; NA for None."""
    if value is None:
        return NA
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return f"{text} {unit}" if unit else text


def percent(value: float | None, digits: int = 0) -> str:
    """A share as a percentage with `digits` decimals: 0.1234 -> '12%' (digits 0), '12.3%' (digits 1); NA for None."""
    return NA if value is None else f"{value:.{digits}%}"


def bytes_as(value: float | None, unit: str) -> float | None:
    """A byte count in `unit` (a key of BYTE_UNITS), as a number for a column whose heading names the unit."""
    return None if value is None else value / BYTE_UNITS[unit]


def bytes_text(value: float | None, unit: str = "GiB", digits: int = 1, grouped: bool = True) -> str:
    """A byte count in `unit` (a key of BYTE_UNITS) with `digits` decimals and the unit: 1536 MiB -> '1.5 GiB';
    `bytes_text(value, "MiB", 0)` -> '1,536 MiB'; NA for None."""
    return fixed(bytes_as(value, unit), digits, unit, grouped)


def size_text(value: float | None, gib_digits: int = 1, mib_digits: int = 0) -> str:
    """Bytes in GiB from 1 GiB up, in MiB below (so that small parts do not read 0.0 GiB); NA for None."""
    if value is None:
        return NA
    return bytes_text(value, "GiB", gib_digits) if value >= GIB else bytes_text(value, "MiB", mib_digits)


def human_bytes(count: int) -> str:
    """Bytes in the largest binary unit under 1024 of it, up to GiB: 512 B, 1.5 KiB, 2.0 GiB (as pack prints)."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def decimal_bytes(count: int) -> str:
    """Bytes in powers of 1000 (kB, MB, GB, TB), as sizes such as GPUFEED_CACHE_LIMIT=20GB are given."""
    for unit, scale in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def duration_text(hours: float) -> str:
    """Hours as a person reads them: 3.2 h, 14 min, 40 s, 5 ms, under 1 ms."""
    if hours >= 1:
        return f"{hours:.1f} h"
    if hours * 60 >= 1:
        return f"{hours * 60:.0f} min"
    seconds = hours * 3600
    if seconds >= 1:
        return f"{seconds:.0f} s"
    return f"{seconds * 1000:.0f} ms" if seconds * 1000 >= 1 else "under 1 ms"


def money_text(usd: float) -> str:
    """Dollars with cents: $1,234.56; under a cent says so."""
    return f"${usd:,.2f}" if usd >= 0.005 else "under a cent"
