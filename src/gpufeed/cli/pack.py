"""`gpufeed pack`: write a `.gpuf` packed dataset from the built-in data, a `.npz` file or a folder; `--verify`."""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from gpufeed.cli.output import add_json_flag, console, emit_json, error_console, to_jsonable
from gpufeed.data.format.header import read_header
from gpufeed.data.format.verify import verify_checksums
from gpufeed.data.pack.result import PackResult, SkippedFile
from gpufeed.data.pack.sources import pack
from gpufeed.errors import ConfigError
from gpufeed.units import human_bytes

EPILOG = """\
examples:
  gpufeed pack builtin data/train.gpuf                  # the built-in dataset: 50,000 train images
  gpufeed pack builtin:test data/test.gpuf              # its 10,000 test images
  gpufeed pack builtin small.gpuf --count 5000 --seed 1
  gpufeed pack photos/ photos.gpuf --size 64 64         # one subfolder per class; scale, centre-crop
  gpufeed pack photos/ photos.gpuf --max-side 256       # each image at its own size, longer side <= 256, JPEG
  gpufeed pack photos/ photos.gpuf --max-side 256 --encoding raw   # uint8 pixels: more disk, no decoding
  gpufeed pack scans/ scans.gpuf --channels 1 --strict  # greyscale; stop at the first bad file
  gpufeed pack arrays.npz data.gpuf                     # arrays x (N, H, W[, C]) uint8 and y (N,)
  gpufeed pack photos/ photos.gpuf --json -             # JSON only, on standard output
  gpufeed pack --verify data/train.gpuf                 # recompute every checksum

SRC is 'builtin', 'builtin:test', a .npz file, or a folder with one subfolder of images per class
(.jpg .jpeg .png .bmp .webp .gif .tif .tiff; files directly in a folder with no subfolders form one
class). Images become RGB (or greyscale with --channels 1); alpha is dropped; 16-bit images are scaled
to 8 bits; EXIF orientation is applied. Without --size or --max-side every image must have the same size;
with --size each image is scaled to cover H x W and centre-cropped; with --max-side N each keeps its aspect
ratio and is scaled down (never up) so its longer side is at most N, and is stored as a JPEG (--quality,
default 90; a JPEG source that needs no scaling, rotation or conversion is stored byte for byte) or, with
--encoding raw, as uint8 pixels. --encoding also applies to --size and to .npz and builtin sources. Bad files
are skipped and listed (--strict stops at the first instead). OUT appears only once complete: an interrupted
pack leaves nothing there. --verify names each damaged sample of a file packed with --max-side or --encoding.
"""

SKIPPED_SHOWN = 20
CLASSES_SHOWN = 10


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "pack",
        help="pack a dataset into one .gpuf file (or --verify one)",
        description="Pack images and labels into one .gpuf file that gpufeed reads by memory map: from the "
                    "built-in dataset, a .npz file, or a folder of images. --verify checks a packed file.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("src", nargs="?", metavar="SRC", help="builtin, builtin:test, a .npz file or a folder")
    parser.add_argument("out", nargs="?", metavar="OUT.gpuf", help="the file to write")
    parser.add_argument("--verify", metavar="FILE.gpuf", help="check every checksum of FILE and exit")
    parser.add_argument("--size", nargs=2, type=int, metavar=("H", "W"),
                        help="folders: scale each image to cover H x W, then crop the centre")
    parser.add_argument("--max-side", type=int, metavar="N",
                        help="folders: keep each image's aspect ratio, scaled down so its longer side is at most N")
    parser.add_argument("--encoding", choices=("jpeg", "raw"),
                        help="store samples as JPEG files (default with --max-side) or raw uint8 pixels")
    parser.add_argument("--quality", type=int, metavar="Q", help="JPEG quality 1..100 (default 90)")
    parser.add_argument("--channels", type=int, choices=(1, 3), help="folders: 3 for RGB (default), 1 for grey")
    parser.add_argument("--count", type=int, metavar="N", help="builtin: number of images (default: whole split)")
    parser.add_argument("--split", choices=("train", "test"), help="builtin: which split (default train)")
    parser.add_argument("--seed", type=int, metavar="S", help="builtin: the seed (default 0)")
    parser.add_argument("--strict", action="store_true", help="folders: stop at the first bad file")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="folders: decoding processes (default: all cores; 0: decode in this process)")
    add_json_flag(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.json not in (None, "-") and not Path(args.json).parent.exists():
        raise ConfigError(f"cannot write --json {args.json}: folder {Path(args.json).parent} does not exist")
    if args.verify is not None:
        if args.src is not None or args.out is not None:
            raise ConfigError("--verify takes one FILE.gpuf and no SRC or OUT: gpufeed pack --verify FILE.gpuf")
        return _verify(args.verify, args.json)
    if args.src is None or args.out is None:
        raise ConfigError("give SRC and OUT.gpuf, for example: gpufeed pack builtin data/train.gpuf "
                          "(see gpufeed pack --help)")
    options = {"size": args.size, "max_side": args.max_side, "encoding": args.encoding, "quality": args.quality,
               "channels": args.channels, "count": args.count, "split": args.split,
               "seed": args.seed, "strict": True if args.strict else None, "workers": args.workers}
    with progress_bar(f"packing {args.src}", in_bytes=False) as update:
        result = pack(args.src, args.out, progress=update, **options)
    emit_json(result_json(result), args.json)
    if args.json != "-":
        _print_summary(result)
    return 0


@contextlib.contextmanager
def progress_bar(description: str, in_bytes: bool) -> Iterator[Any]:
    """A rich progress bar on standard error (shown when it is a terminal); yields `update(done, total)`."""
    counts = (DownloadColumn(), TransferSpeedColumn()) if in_bytes else (MofNCompleteColumn(),)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), *counts, TimeElapsedColumn(),
                        TimeRemainingColumn(), console=error_console, disable=not error_console.is_terminal,
                        transient=True)
    task = progress.add_task(description, total=None)

    def update(done: int, total: int | None = None) -> None:
        progress.update(task, completed=done, total=total)

    with progress:
        yield update


def result_json(result: PackResult) -> dict:
    """The result as JSON, with the derived rate and the count of skipped files."""
    return {**to_jsonable(result), "images_per_second": to_jsonable(result.images_per_second),
            "skipped_count": len(result.skipped)}


def _say(text: str) -> None:
    console.print(text, markup=False, soft_wrap=True)


def _shape_text(shape, max_shape) -> str:
    if shape is not None:
        return f"{shape[0]} x {shape[1]} x {shape[2]} (height x width x channels)"
    return f"up to {max_shape[0]} x {max_shape[1]} x {max_shape[2]} (height x width x channels; sizes differ)"


def _print_summary(result: PackResult) -> None:
    names = ", ".join(result.classes[:CLASSES_SHOWN]) + (", ..." if len(result.classes) > CLASSES_SHOWN else "")
    _say(f"packed {result.count:,} images into {result.destination}")
    _say(f"  shape         {_shape_text(result.shape, result.max_shape)}")
    if result.version > 1:
        quality = f" quality {result.quality}" if result.encoding == "jpeg" else ""
        limit = f"; longer side at most {result.max_side}" if result.max_side else ""
        stored = f"; {result.passthrough:,} JPEG files stored byte for byte" if result.encoding == "jpeg" else ""
        _say(f"  encoding      {result.encoding}{quality}{limit}{stored}")
    _say(f"  classes       {len(result.classes)}: {names}")
    _say(f"  size on disk  {human_bytes(result.bytes_written)}")
    _say(f"  time          {result.seconds:.2f} s ({result.images_per_second:,.0f} images/s)")
    if result.resized or result.converted:
        _say(f"  resized       {result.resized:,}; mode converted {result.converted:,}")
    print_skipped(result.skipped, _say)


def print_skipped(skipped: Sequence[SkippedFile], say: Callable[[str], None],
                  more: str = "--json PATH lists them all") -> None:
    """The files a pack skipped, counted and named (the first SKIPPED_SHOWN), as `gpufeed pack` prints them."""
    if skipped:
        say(f"  skipped       {len(skipped):,} file{'s' if len(skipped) != 1 else ''}:")
        for item in skipped[:SKIPPED_SHOWN]:
            say(f"    {item.path}: {item.reason}")
        if len(skipped) > SKIPPED_SHOWN:
            say(f"    ... and {len(skipped) - SKIPPED_SHOWN:,} more ({more})")


def _verify(path: str, json_path: str | None) -> int:
    started = time.perf_counter()
    header = read_header(path)
    total = header.checked_bytes
    with progress_bar(f"verifying {path}", in_bytes=True) as update:
        checked = verify_checksums(path, header, progress=lambda done: update(done, total))
    seconds = time.perf_counter() - started
    shape = list(header.max_shape) if header.is_fixed_size else None
    emit_json({"path": path, "ok": True, "count": header.count, "version": header.version,
               "encoding": header.encoding, "shape": shape, "max_shape": list(header.max_shape),
               "classes": list(header.classes), "bytes_checked": checked, "seconds": seconds}, json_path)
    if json_path != "-":
        kind = "" if header.encoding == "raw" else f" ({header.encoding})"
        _say(f"OK {path}: {header.count:,} images{kind} of {_shape_text(shape, header.max_shape)}, "
             f"{len(header.classes)} classes; {human_bytes(checked)} checked in {seconds:.2f} s")
    return 0
