"""A sourced, dated table of GPU specifications (`hardware/gpus.json`) and lookups by device name.

Units (see the `notes` at the top of gpus.json): TFLOP/s are 1e12 operations per second, dense (without
structured sparsity); `memory_bytes` is the vendor's stated size x 2^30; bandwidth is decimal GB/s; power in
watts. A figure the source does not give is `None` in the table and `NA` from `peak_tflops`.

    spec = find_gpu(torch.cuda.get_device_name())    # GpuSpec, or NA when the card is not in the table
    peak = peak_tflops(spec, "bf16")                  # float TFLOP/s, or NA with the reason
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from gpufeed.hardware.na import NA

PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")
TFLOPS_KEYS = ("fp64", "fp64_tensor", "fp32", "tf32", "bf16", "fp16", "fp8")
FORM_FACTORS = ("SXM", "OAM", "PCIe", "consumer")
MODULE_FORM_FACTORS = ("SXM", "OAM")  # modules on multi-GPU baseboards, sold as whole systems
MODULE_SYSTEM_SIZES = (4, 8)  # GPUs per baseboard: HGX 4-GPU and 8-GPU, the 8-module OAM platform
CARD_SYSTEM_SIZES = tuple(range(1, 9))  # PCIe cards: 1 in a workstation to 8 in a server
NOT_IN_CATALOG = "not in the catalog (hardware/gpus.json); peak unknown"
TOP_LEVEL_KEYS = {"schema", "updated", "notes", "gpus"}
_BRAND_WORDS = {"nvidia", "geforce", "amd", "instinct", "tesla"}

_NUMBER = (int, float)
# field -> (accepted JSON types, may be null)
_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "name": ((str,), False), "match": ((list,), False), "vendor": ((str,), False),
    "architecture": ((str,), False), "compute_capability": ((str,), False), "released": ((str,), False),
    "memory_bytes": ((int,), False), "memory_bandwidth_gb_per_s": (_NUMBER, False), "tdp_w": (_NUMBER, False),
    "pcie_generation": ((int,), True), "pcie_lanes": ((int,), True), "form_factor": ((str,), False),
    "gpu_link": ((str,), False), "gpu_link_gb_per_s": (_NUMBER, True), "gpu_link_source": ((str,), False),
    "node_network_gb_per_s": (_NUMBER, True), "node_network_source": ((str,), True),
    "bf16": ((bool,), False), "system_gpus": ((list,), False), "system_source": ((str,), False),
    "reference_system": ((str,), True), "reference_system_power_w": (_NUMBER, True),
    "reference_system_ram_bytes": ((int,), True), "reference_system_source": ((str,), True),
    "dense_tflops": ((dict,), False), "sparse_tflops": ((dict,), False),
    "price_usd": (_NUMBER, True), "price_date": ((str,), True), "price_source": ((str,), True),
    "rent_usd_per_hour": (_NUMBER, True), "rent_source": ((str,), True),
    "source": ((str,), False), "source_date": ((str,), False), "notes": ((str,), False),
}
GPU_LINKS = ("nvlink", "nvlink-bridge", "xgmi", "pcie")  # NVSwitch'd NVLink, a 2-card bridge, AMD's mesh, none
_REFERENCE_KEYS = ("reference_system", "reference_system_power_w", "reference_system_ram_bytes",
                   "reference_system_source")
_DATE_FORMATS = {"released": r"\d{4}-\d{2}", "source_date": r"\d{4}-\d{2}-\d{2}", "price_date": r"\d{4}-\d{2}(-\d{2})?"}


@dataclass(frozen=True)
class GpuSpec:
    """One row of gpus.json. TFLOP/s tables map precision (TFLOPS_KEYS) -> dense figure, or None when unknown."""

    name: str
    match: tuple[str, ...]  # regular expressions searched in the lower-cased device name
    vendor: str
    architecture: str
    compute_capability: str  # "9.0"; on ROCm what torch reports for the gfx target
    released: str  # YYYY-MM of the vendor's launch announcement
    memory_bytes: int  # vendor's stated size x 2^30
    memory_bandwidth_gb_per_s: float  # decimal GB/s
    tdp_w: float  # maximum board power
    pcie_generation: int | None
    pcie_lanes: int | None
    gpu_link: str  # one of GPU_LINKS: what collectives between the GPUs of one machine run over
    gpu_link_gb_per_s: float | None  # per GPU, per direction (vendors' bidirectional figures halved); None for pcie
    gpu_link_source: str
    node_network_gb_per_s: float | None  # per GPU, per direction, between machines (its server's NIC share)
    node_network_source: str | None
    form_factor: str  # one of FORM_FACTORS
    bf16: bool  # runs bf16 at all (Volta and Turing do not)
    system_gpus: tuple[int, ...]  # GPUs one system is sold with: (4, 8) or (8,) for modules, 1-8 for cards
    system_source: str
    reference_system: str | None  # the vendor's 8-GPU system on this module (DGX), or None
    reference_system_power_w: float | None  # its stated maximum power
    reference_system_ram_bytes: int | None  # its system memory
    reference_system_source: str | None
    dense_tflops: dict[str, float | None] = field(hash=False)
    sparse_tflops: dict[str, float | None] = field(hash=False)  # as data sheets quote "with sparsity"
    price_usd: float | None
    price_date: str | None
    price_source: str | None
    rent_usd_per_hour: float | None
    rent_source: str | None
    source: str  # URL of the data sheet or whitepaper
    source_date: str  # YYYY-MM-DD the row was compiled against the source
    notes: str

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        """The vendor's memory bandwidth in bytes per second (the table states decimal GB/s)."""
        return self.memory_bandwidth_gb_per_s * 1e9

    @property
    def sold_as_systems(self) -> bool:
        """SXM and OAM modules are sold on 4- or 8-GPU baseboards, never alone."""
        return self.form_factor in MODULE_FORM_FACTORS


def _check_tflops(table: dict, where: str, key: str) -> dict[str, float | None]:
    missing, unknown = sorted(set(TFLOPS_KEYS) - set(table)), sorted(set(table) - set(TFLOPS_KEYS))
    if missing or unknown:
        raise ValueError(f"{where}: {key} must have exactly the keys {', '.join(TFLOPS_KEYS)}; "
                         f"missing {missing}, unknown {unknown}")
    checked: dict[str, float | None] = {}
    for precision in TFLOPS_KEYS:
        value = table[precision]
        if value is not None and (isinstance(value, bool) or not isinstance(value, _NUMBER) or value <= 0):
            raise ValueError(f"{where}: {key}.{precision} must be a positive number or null, not {value!r}")
        checked[precision] = None if value is None else float(value)
    return checked


def _check_row(row: Any, where: str) -> GpuSpec:
    if not isinstance(row, dict):
        raise ValueError(f"{where}: each entry of 'gpus' must be an object, not {type(row).__name__}")
    missing, unknown = sorted(set(_FIELDS) - set(row)), sorted(set(row) - set(_FIELDS))
    if missing or unknown:
        raise ValueError(f"{where}: missing keys {missing}, unknown keys {unknown}; "
                         f"every row has exactly: {', '.join(_FIELDS)}")
    for key, (types, nullable) in _FIELDS.items():
        value = row[key]
        if value is None and nullable:
            continue
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise ValueError(f"{where}: {key} must be {' or '.join(t.__name__ for t in types)}"
                             f"{' or null' if nullable else ''}, not {value!r}")
    for key, pattern in _DATE_FORMATS.items():
        if row[key] is not None and not re.fullmatch(pattern, row[key]):
            raise ValueError(f"{where}: {key} {row[key]!r} is not a date of the form {pattern}")
    if row["form_factor"] not in FORM_FACTORS:
        raise ValueError(f"{where}: form_factor {row['form_factor']!r} is not one of {', '.join(FORM_FACTORS)}")
    if not row["match"] or not all(isinstance(p, str) and p and p == p.lower() for p in row["match"]):
        raise ValueError(f"{where}: match must be a non-empty list of lower-case patterns")
    for pattern in row["match"]:
        try:
            re.compile(pattern)
        except re.error as error:
            raise ValueError(f"{where}: match pattern {pattern!r} is not a regular expression ({error})") from None
    _check_systems(row, where)
    values = dict(row)
    values["match"] = tuple(row["match"])
    values["system_gpus"] = tuple(row["system_gpus"])
    values["dense_tflops"] = _check_tflops(row["dense_tflops"], where, "dense_tflops")
    values["sparse_tflops"] = _check_tflops(row["sparse_tflops"], where, "sparse_tflops")
    for key in ("memory_bandwidth_gb_per_s", "tdp_w", "price_usd", "rent_usd_per_hour", "reference_system_power_w",
                "gpu_link_gb_per_s", "node_network_gb_per_s"):
        values[key] = None if row[key] is None else float(row[key])
    return GpuSpec(**values)


def _check_systems(row: dict, where: str) -> None:
    """System sizes as sold, bf16 against the bf16 figure, and the reference system's fields all or none."""
    sizes = row["system_gpus"]
    counts = all(isinstance(n, int) and not isinstance(n, bool) for n in sizes)
    if not sizes or not counts or sizes != sorted(set(sizes)):
        raise ValueError(f"{where}: system_gpus must be a sorted list of distinct GPU counts, not {sizes!r}")
    module = row["form_factor"] in MODULE_FORM_FACTORS
    allowed = MODULE_SYSTEM_SIZES if module else CARD_SYSTEM_SIZES
    if not set(sizes) <= set(allowed) or (not module and tuple(sizes) != CARD_SYSTEM_SIZES):
        kind = "an SXM or OAM module comes in systems of 4 or 8" if module else "a card goes 1 to 8 in a system"
        raise ValueError(f"{where}: system_gpus {sizes} does not fit form_factor {row['form_factor']!r}: {kind}")
    if row["bf16"] != (row["dense_tflops"].get("bf16") is not None):
        figure = row["dense_tflops"].get("bf16")
        raise ValueError(f"{where}: bf16 is {row['bf16']} but dense_tflops.bf16 is {figure!r}; a card without "
                         f"bf16 has no bf16 figure, and one with it has one")
    if row["gpu_link"] not in GPU_LINKS or (row["gpu_link"] == "pcie") != (row["gpu_link_gb_per_s"] is None):
        raise ValueError(f"{where}: gpu_link must be one of {', '.join(GPU_LINKS)}, with gpu_link_gb_per_s null "
                         f"exactly for pcie; got {row['gpu_link']!r} at {row['gpu_link_gb_per_s']!r}")
    given = [row[key] is not None for key in _REFERENCE_KEYS]
    if any(given) and not all(given):
        raise ValueError(f"{where}: give all of {', '.join(_REFERENCE_KEYS)} or none")


def _read(path: Path | None) -> tuple[str, str]:
    if path is None:
        resource = resources.files("gpufeed.hardware").joinpath("gpus.json")
        return "hardware/gpus.json", resource.read_text(encoding="utf-8")
    return str(path), Path(path).read_text(encoding="utf-8")


@functools.lru_cache(maxsize=8)
def load_catalog(path: Path | str | None = None) -> tuple[GpuSpec, ...]:
    """Every row of the GPU table, validated. `path` defaults to the packaged gpus.json. Cached per path.

    Raises ValueError naming the file and the row for a malformed table (unknown or missing keys, wrong types).
    """
    label, text = _read(None if path is None else Path(path))
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{label}: not valid JSON ({error})") from None
    if not isinstance(document, dict) or set(document) != TOP_LEVEL_KEYS:
        raise ValueError(f"{label}: the top level must be an object with exactly the keys {sorted(TOP_LEVEL_KEYS)}")
    if document["schema"] != 1:
        raise ValueError(f"{label}: schema {document['schema']!r} is not supported (expected 1)")
    if not isinstance(document["gpus"], list):
        raise ValueError(f"{label}: 'gpus' must be a list of rows")
    specs: list[GpuSpec] = []
    for index, row in enumerate(document["gpus"]):
        name = row.get("name") if isinstance(row, dict) else None
        specs.append(_check_row(row, f"{label}: row {index} ({name or 'no name'})"))
    names = [spec.name for spec in specs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"{label}: duplicate row names {duplicates}")
    return tuple(specs)


def find_gpu(device_name: str, catalog: tuple[GpuSpec, ...] | None = None) -> GpuSpec | NA:
    """The row for a device name as torch.cuda.get_device_name() or NVML gives it, or NA when none matches.

    Names are lower-cased with runs of spaces collapsed. When several rows match, the one whose pattern matched
    the longest stretch of the name wins (so 'h200 nvl' beats 'h200'); on a tie the earlier row wins.
    """
    name = " ".join(str(device_name).lower().split())
    best: GpuSpec | None = None
    best_length = 0
    for spec in load_catalog() if catalog is None else catalog:
        for pattern in spec.match:
            found = re.search(pattern, name)
            if found and found.end() - found.start() > best_length:
                best, best_length = spec, found.end() - found.start()
    if best is None:
        return NA(f"{device_name!r} is {NOT_IN_CATALOG}")
    return best


def _words(text: str) -> list[str]:
    """Lower-case words of a GPU name without the vendor's brand words: 'NVIDIA GeForce RTX 4090' -> rtx, 4090."""
    return [word for word in re.split(r"[^a-z0-9]+", text.lower()) if word and word not in _BRAND_WORDS]


def _word_matches(part: str, word: str) -> bool:
    """'4090' = '4090'; letters begin a word ('sxm' -> 'sxm5', 'ada' -> 'ada'); a size may drop its unit ('80' ->
    '80gb'). A model number is not a prefix of another: 'l40' is not 'l40s', 'mi300' not 'mi300x'."""
    return part == word or (part.isalpha() and word.startswith(part)) or (part.isdigit() and word == part + "gb")


def match_gpu(text: str, catalog: tuple[GpuSpec, ...] | None = None) -> GpuSpec | NA:
    """The row a person means by `text` ('4090', 'a100 80gb sxm', 'NVIDIA B200'), or NA naming the close ones.

    In order: a row's exact name; a device name `find_gpu` resolves; the one row whose name holds every word of
    `text` (`_word_matches`; brand words like NVIDIA and GeForce dropped). Several
    such rows are NA listing them; none is NA listing the closest names (difflib) or, with none close, all.
    """
    rows = load_catalog() if catalog is None else catalog
    exact = [spec for spec in rows if spec.name.lower() == " ".join(text.lower().split())]
    if exact:
        return exact[0]
    found = find_gpu(text, rows)
    if not isinstance(found, NA):
        return found
    wanted = _words(text)
    if wanted:
        holding = [spec for spec in rows if all(any(_word_matches(part, word) for word in _words(spec.name))
                                                for part in wanted)]
        if len(holding) == 1:
            return holding[0]
        if holding:
            return NA(f"{text!r} matches {len(holding)} catalog GPUs: {'; '.join(s.name for s in holding)}; "
                      f"give more of the name")
    names = [spec.name for spec in rows]
    close = difflib.get_close_matches(text, names, n=4, cutoff=0.3) or difflib.get_close_matches(
        " ".join(wanted), [" ".join(_words(name)) for name in names], n=4, cutoff=0.3)
    close = [name for name in names if name in close or " ".join(_words(name)) in close]
    shown = "close names: " + "; ".join(close) if close else "the catalog holds: " + "; ".join(names)
    return NA(f"{text!r} is not a GPU in the catalog (hardware/gpus.json); {shown}")


def peak_tflops(spec: GpuSpec | NA, precision: str) -> float | NA:
    """Dense peak TFLOP/s of `spec` for a matmul in `precision` (one of PRECISIONS), or NA with the reason.

    fp64 is the FP64 tensor-core rate where the card has one (cuBLAS DGEMM uses the FP64 tensor cores on A100 and
    H100; rocBLAS uses the FP64 matrix cores on MI300X), else the plain FP64 rate. fp16 and bf16 are tensor-core
    rates with FP32 accumulate; tf32 is the TF32 tensor-core rate (PyTorch uses it only when allowed). An NA
    `spec` (from find_gpu) is passed through unchanged.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if isinstance(spec, NA):
        return spec
    figures = spec.dense_tflops
    value = figures["fp64_tensor"] if precision == "fp64" and figures["fp64_tensor"] is not None else figures[precision]
    if value is None:
        return NA(f"{spec.name}: no dense {precision} figure in hardware/gpus.json (see the row's notes)")
    return value
