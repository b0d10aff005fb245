"""gpufeed train: the command line of the main job."""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
from pathlib import Path

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from gpufeed.cli.output import (
    add_html_flag,
    add_json_flag,
    check_output_paths,
    console,
    emit_document,
    emit_json,
    error_console,
)
from gpufeed.cli.pack import print_skipped, progress_bar
from gpufeed.errors import ConfigError, Interrupted
from gpufeed.torchrun import launch
from gpufeed.train.config import TrainConfig
from gpufeed.train.events import (
    FolderPacking,
    FolderReady,
    FolderWaiting,
    RunComplete,
    RunStarted,
    StepLog,
    TrainResult,
)
from gpufeed.train.outputs import read_contents
from gpufeed.units import bytes_text, decimal_bytes, fixed, not_available, percent

EXAMPLES = """examples:
  gpufeed train                                   # the CNN on the built-in dataset, on the best device here
  gpufeed train --data photos/train --val photos/val --image-size 224   # folders: packed once into the cache
  gpufeed train --model mlp --hidden 1024,512,256 --epochs 3
  gpufeed train --json run.json --html run.html   # the summary as JSON and a page with the step timeline
  gpufeed pack photos/ train.gpuf --size 64 64 && gpufeed train --data train.gpuf --val-fraction 0.1
  gpufeed train --out runs/a --checkpoint-every 200 ; gpufeed train --out runs/a --resume
  gpufeed train --data train.gpuf --val val.gpuf --model resnet50 --image-size 224  # photos (pack --max-side 256)
  gpufeed train --out runs/a --resume --epochs 10  # the same run, trained longer
  gpufeed train --out runs/a --overwrite --model mlp   # replaces the run in runs/a
  torchrun --nproc_per_node 4 -m gpufeed train --data train.gpuf --batch-size 256     # 4 GPUs, DDP
  torchrun --nnodes 2 --node_rank R --nproc_per_node 8 --rdzv_backend c10d \\
           --rdzv_endpoint HOST0:29500 -m gpufeed train --data train.gpuf          # on each of 2 machines

A folder (one subfolder of images per class) as --data or --val needs --image-size: it is packed on first use
into $GPUFEED_CACHE (default ~/.cache/gpufeed) as JPEG (quality 90), longer side --max-side (default
ceil(N / 0.875): 256 for 224), and reused while its files (paths, sizes, mtimes) and those options stay the same;
under torchrun the first rank to take the folder's lock packs it and the others wait. The cache keeps to
$GPUFEED_CACHE_LIMIT (default 50GB), removing the least recently used packs. --resume refuses a folder whose files
changed since the run began.
"""


def _hidden(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--hidden takes sizes like 512,256, got {text!r}") from None
    if any(size <= 0 for size in sizes):
        raise argparse.ArgumentTypeError(f"--hidden sizes must be positive, got {text!r}")
    return sizes


def _batch(text: str):
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--batch-size takes a positive integer or 'auto', got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"--batch-size must be positive, got {value}")
    return value


def register(subparsers) -> None:
    parser = subparsers.add_parser("train", help="train an image classifier on a GPU or the CPU",
                                   description="Train an MLP, a CIFAR-style CNN, a ResNet-18 or a ResNet-50 on a "
                                               "packed dataset (default: the built-in one), photos of any size "
                                               "included, with checkpoints and exact resume.",
                                   epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    # No defaults here: TrainConfig holds them, and an option left out is one a resumed run takes from the run.
    parser.add_argument("--data", help="TRAIN.gpuf, a folder of images (packed into the cache), or 'builtin' "
                                       "(default)")
    parser.add_argument("--val", dest="validation",
                        help="a packed validation set or a folder (same shape and classes)")
    parser.add_argument("--val-fraction", dest="validation_fraction", type=float,
                        help="hold out this share of --data for validation (default 0.1 without --val)")
    parser.add_argument("--count", type=int, help="built-in data only: train on this many images (default 50000)")
    parser.add_argument("--model", help="mlp | cnn | resnet18 | resnet50 (default cnn)")
    parser.add_argument("--image-size", type=int, metavar="N",
                        help="train on N x N random-resized crops (validation: centre crops); needed when the "
                             "packed images vary in size (gpufeed pack --max-side) and for a folder")
    parser.add_argument("--max-side", type=int, metavar="N",
                        help="a folder as --data or --val: pack it with its longer side at most N "
                             "(default ceil(image size / 0.875))")
    parser.add_argument("--hidden", type=_hidden, help="MLP hidden sizes (default 512,256)")
    parser.add_argument("--width", type=int, help="CNN base width (default: the model's)")
    parser.add_argument("--epochs", type=int, help="passes over the data (default 5)")
    parser.add_argument("--batch-size", type=_batch, help="per device (default 256), or 'auto' (largest that fits)")
    parser.add_argument("--lr", dest="learning_rate", type=float, help="peak learning rate (AdamW; default per model)")
    parser.add_argument("--precision", help="auto (default) | fp32 | bf16 | fp16 | fp64")
    parser.add_argument("--device", help="auto (default) | cpu | cuda | cuda:N | mps")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--workers", type=int, help="staging threads of the feed")
    parser.add_argument("--seed", type=int, help="seeds the weights, the shuffle and the validation split (default 0)")
    parser.add_argument("--out", help="folder for config.json, metrics.jsonl, model.safetensors, checkpoints")
    parser.add_argument("--checkpoint-every", dest="checkpoint_every_steps", type=int,
                        help="also checkpoint every N steps (always at each epoch end)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out from its newest valid checkpoint, with its settings")
    parser.add_argument("--overwrite", action="store_true",
                        help="remove the run in --out (its files and checkpoints) and train a new one there")
    parser.add_argument("--log-every", dest="log_every_steps", type=int, help="steps per log line (default 20)")
    parser.add_argument("--max-steps", type=int, help="stop after this many steps in all")
    add_json_flag(parser, "write the summary as JSON to PATH ('-' for standard output)")
    add_html_flag(parser)
    parser.set_defaults(handler=run)


class _Screen:
    """Turns the run's events into a rich progress bar (quiet when the JSON goes to standard output)."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.out = error_console if quiet else console
        self.progress: Progress | None = None
        self.task = None
        self.packing: contextlib.ExitStack | None = None  # the bar of a folder being packed
        self.update_packing = None

    def __call__(self, event) -> None:
        if isinstance(event, FolderPacking):
            if self.packing is None:
                self.packing = contextlib.ExitStack()
                self.update_packing = self.packing.enter_context(progress_bar(f"packing {event.folder}", False))
            self.update_packing(event.done, event.total)
        elif isinstance(event, FolderWaiting):
            self._say(f"{event.folder}: another process is packing it (lock {event.lock}); waiting for it")
        elif isinstance(event, FolderReady):
            self._close_packing()
            self._folder_ready(event)
        elif isinstance(event, RunStarted):
            self._started(event)
        elif isinstance(event, StepLog) and self.progress is not None:
            busy = "" if event.device_busy_fraction is None else f" device busy {event.device_busy_fraction:.0%}"
            if event.gpu_utilization_percent is not None:
                busy += f" (NVML {event.gpu_utilization_percent:.0f}%)"
            self.progress.update(self.task, completed=event.step, description=(
                f"epoch {event.epoch + 1} loss {event.loss:.3f} {fixed(event.samples_per_s, 0, 'samples/s')} "
                f"(last interval) data wait {event.data_wait_fraction:.0%}{busy}"))

    def _started(self, event: RunStarted) -> None:
        if not self.quiet:
            shown = {key: value for key, value in event.config.items() if value not in (None, False)
                     and key != "explicit" and not (key == "hidden" and event.config["model"] != "mlp")}
            self.out.print(f"[bold]gpufeed train[/bold] {event.data}: {event.train_samples} train, "
                           f"{event.validation_samples} validation samples")
            self.out.print(f"  model {event.config['model']} ({event.parameters:,} parameters) on {event.device}, "
                           f"{event.precision} ({event.precision_reason}), world size {event.world_size}, "
                           f"effective batch {event.effective_batch_size}, {event.total_steps} steps")
            self.out.print(f"  configuration: {json.dumps(shown, default=str)}", soft_wrap=True)
        for skipped in event.skipped_checkpoints:
            error_console.print(f"warning: skipped checkpoint {skipped}")
        if event.resumed_from:
            self.out.print(f"  resumed from {event.resumed_from}")
        for note in event.notes:
            self.out.print(f"  note: {note}", markup=False)
        if event.nothing_to_resume:
            self.out.print(f"  nothing to resume in {event.config['out']}: starting fresh", markup=False)
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                 TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                                 TimeRemainingColumn(), console=self.out, transient=False)
        self.task = self.progress.add_task("starting", total=event.total_steps)
        self.progress.start()

    def _say(self, text: str) -> None:
        self.out.print(text, markup=False, soft_wrap=True)

    def _close_packing(self) -> None:
        if self.packing is not None:
            self.packing.close()
            self.packing = None

    def _folder_ready(self, event: FolderReady) -> None:
        cached, result = event.cached, event.cached.result
        more = f"gpufeed pack {event.folder} OUT.gpuf --json - lists them all"
        if result is None and cached.waited_s > 0:  # this process waited: what the packing one saw is news here
            self._say(f"{event.folder}: reused its pack {cached.path} (packed by another process while this one "
                      f"waited; {cached.count:,} images, {decimal_bytes(cached.pack_bytes)})")
            print_skipped(cached.skipped, self._say, more=more)
        elif result is None:
            count = len(cached.skipped)
            skipped = f", {count:,} file{'s' if count != 1 else ''} skipped" if count else ""
            self._say(f"{event.folder}: reused its pack {cached.path} (unchanged; {cached.count:,} images{skipped}, "
                      f"{decimal_bytes(cached.pack_bytes)})")
        else:
            self._say(f"{event.folder}: packed {result.count:,} images into {cached.path} "
                      f"({decimal_bytes(result.bytes_written)}, JPEG quality {result.quality}, longer side at most "
                      f"{result.max_side}, {result.seconds:.1f} s)")
            self._say("  later runs reuse it while the folder's files stay the same")
            print_skipped(result.skipped, self._say, more=more)
        limit = f"{decimal_bytes(cached.limit_bytes)} (GPUFEED_CACHE_LIMIT)"
        if cached.removed:
            self._say(f"  the cache was over its limit of {limit}: removed the least recently used")
        for removed in cached.removed:
            self._say(f"    {removed.path} ({removed.folder}, {decimal_bytes(removed.bytes)}, last used "
                      f"{removed.last_used})")
        if cached.cache_bytes > cached.limit_bytes:
            self._say(f"  note: the cache holds {decimal_bytes(cached.cache_bytes)}, over its limit of {limit}; "
                      f"the packs in use or being packed are kept")

    def close(self) -> None:
        self._close_packing()
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def _summary(result: TrainResult) -> None:
    busy = not_available("CPU") if result.device_busy_fraction is None else percent(result.device_busy_fraction, 1)
    console.print(f"[bold]done[/bold]: validation accuracy {result.validation_accuracy:.2%} "
                  f"(loss {result.validation_loss:.3f}) after {result.steps} steps, {result.seconds:.1f} s")
    console.print(f"  throughput {fixed(result.samples_per_s, 0, 'samples/s')} over the whole run, "
                  f"data wait {percent(result.data_wait_fraction, 1)}, device busy {busy}, "
                  f"peak memory {bytes_text(result.peak_memory_bytes, 'MiB', 0)}")
    if result.precision_reason:
        console.print(f"  precision {result.precision}: {result.precision_reason}", markup=False)
    console.print(f"  verdict: {result.verdict}")
    if result.out:
        console.print(f"  files in {result.out}: {read_contents(Path(result.out)).describe()}",
                      markup=False)


def run(args) -> int:
    from gpufeed.train.loop import train  # torch and the models load only when training

    check_output_paths(args, inputs=tuple(path for path in (args.data, args.validation) if path and path != "builtin"))
    ignored = ("handler", "command", "json", "html", "argv")
    # What the command line set (None and False: left out), recorded so that a resumed run takes the rest.
    options = {key: value for key, value in vars(args).items()
               if key not in ignored and value is not None and value is not False}
    if options.get("workers", 1) < 1:
        raise ConfigError(f"--workers must be at least 1, got {options['workers']}")
    config = TrainConfig.from_dict(options | {"explicit": tuple(sorted(options))})
    screen = _Screen(quiet=args.json == "-")
    try:
        result = train(config, on_event=screen)
    except Interrupted as stopped:
        screen.close()
        if launch().is_main:
            error_console.print(_interrupted_line(stopped, getattr(args, "argv", None)), markup=False, soft_wrap=True)
        return stopped.exit_status
    finally:
        screen.close()
    if not launch().is_main:  # under torchrun only rank 0 reports
        return 0
    if isinstance(result, RunComplete):
        return _complete(result, args)
    if args.json != "-":
        _summary(result)
    emit_document(result, "train", args)
    return 0


def _interrupted_line(stopped: Interrupted, words: list[str] | None) -> str:
    """Where the run stopped, what was saved, and the command that continues it."""
    if stopped.checkpoint is None:
        return f"interrupted: {stopped}; give --out DIR to keep checkpoints of a run"
    words = [word for word in (words or ["train", "--out", stopped.out]) if word != "--overwrite"]
    if "--resume" not in words:
        words.append("--resume")
    if launch().distributed:
        return f"interrupted: {stopped}; continue with the same torchrun command and --resume"
    return f"interrupted: {stopped}; continue with: gpufeed {shlex.join(words)}"


def _complete(result: RunComplete, args) -> int:
    """A resumed run with no steps left: one line, and with --json a document that says so (no page)."""
    from gpufeed.report.document import about

    (error_console if args.json == "-" else console).print(
        f"{result.out}: already complete after {result.steps} steps ({result.checkpoint}); "
        f"to train it longer, resume with more --epochs (or --max-steps)", markup=False)
    if args.json is not None:
        emit_json({"about": about("train", getattr(args, "argv", None)), **result.to_dict()}, args.json)
    return 0
