"""`train(config)`: the main job. Feed -> model -> optimizer, with checkpoints, exact resume and DDP.

The loop itself is `_run_epochs`; everything before it resolves the run (data, model, precision, batch
size, resume state) so that the loop reads in one sitting. SIGINT or SIGTERM ends it after the current step
with a checkpoint and `Interrupted` (interrupt.py).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from gpufeed.data.feed.feed import Feed
from gpufeed.errors import Interrupted, RunFailed
from gpufeed.measure.sampler import Sampler
from gpufeed.measure.timing import DeviceBusyTimer, Stopwatch
from gpufeed.train import distributed
from gpufeed.train.checkpoint import capture_rng, restore_rng, save_checkpoint
from gpufeed.train.config import TrainConfig
from gpufeed.train.evaluate import evaluate
from gpufeed.train.events import RunComplete, RunStarted, StepLog, TrainResult, peak_memory_bytes, verdict
from gpufeed.train.folder_data import FolderInputs, resolve_folders
from gpufeed.train.inputs import choose_augments, open_training_data
from gpufeed.train.interrupt import StopSignals
from gpufeed.train.models import build_model, parameter_count
from gpufeed.train.outputs import RunFiles
from gpufeed.train.resume import RunStart, start_run
from gpufeed.train.setup import choose_batch_size, choose_precision, fit_batch_to_data
from gpufeed.train.step import Precision, TrainStep, make_optimizer, prepare_model


def learning_rate_at(step: int, total_steps: int, peak: float, warmup_fraction: float) -> float:
    """Linear warm-up to `peak`, then linear decay to zero at `total_steps` (a pure function of the step)."""
    warmup = max(1, int(total_steps * warmup_fraction))
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * max(0.0, (total_steps - step) / max(1, total_steps - warmup))


@dataclass
class _Run:
    """Everything the loop needs, resolved."""

    config: TrainConfig
    context: distributed.DistributedContext
    model: torch.nn.Module  # the module itself (for state dicts and evaluation)
    trained: torch.nn.Module  # what the loop calls: the model, compiled and/or wrapped in DDP
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler | None
    precision: Precision
    train_step: TrainStep
    feed: Feed
    validation: Feed
    total_steps: int
    files: RunFiles | None
    sampler: Sampler | None = None
    step: int = 0
    resumed_from: str | None = None
    skipped_checkpoints: list = field(default_factory=list)
    notes: tuple[str, ...] = ()  # one-line remarks on the settings, for the run's start
    signals: StopSignals = field(default_factory=StopSignals)
    stopped: bool = False  # the ranks agreed to stop after run.step (a signal)
    last_checkpoint: str | None = None
    last_checkpoint_step: int | None = None
    data_description: str = ""  # where the training and validation samples came from, with their counts
    folder_keys: dict = field(default_factory=dict)  # a folder's cache key by role, for exact resume


def train(config: TrainConfig, on_event: Callable[[object], None] | None = None) -> TrainResult | RunComplete:
    """Run one training job; `on_event` receives RunStarted and StepLog records (rank 0 only).

    SIGINT or SIGTERM while it runs: the ranks finish the step they agree on, a checkpoint is written and
    `Interrupted` is raised (a second signal: KeyboardInterrupt at once).

    `--out` holding another run is a ConfigError unless `config.resume` or `config.overwrite` (`resume.py`);
    resuming a run that has taken all its steps returns RunComplete and trains nothing.
    """
    context = distributed.setup(config.device)
    notify = on_event if (on_event is not None and context.is_main) else (lambda event: None)
    with StopSignals() as signals:
        try:
            return _start(config, context, signals, notify)
        finally:
            distributed.teardown(context)


def _start(config: TrainConfig, context: distributed.DistributedContext, signals: StopSignals,
           notify) -> TrainResult | RunComplete:
    start = start_run(config, context)
    if start.complete:
        return RunComplete(out=str(config.out), steps=int(start.state["step"]), total_steps=start.total_steps,
                           checkpoint=str(start.checkpoint))
    inputs = resolve_folders(start.config, (start.state or {}).get("folder_keys"), notify,
                             stop_asked=lambda: signals.received is not None)
    try:
        return _started(start, inputs, context, signals, notify)
    finally:
        inputs.release()


def _started(start: RunStart, inputs: FolderInputs, context: distributed.DistributedContext, signals: StopSignals,
             notify) -> TrainResult:
    config = start.config
    run = _prepare(start, inputs, context)
    run.signals = signals
    shown = config.data if inputs.keys.get("data") else run.feed.dataset.path and str(run.feed.dataset.path)
    notify(RunStarted(config=run.config.to_dict(), device=str(context.device), precision=run.precision.name,
                      precision_reason=run.precision.reason, parameters=parameter_count(run.model),
                      data=shown or config.data,
                      train_samples=run.feed.count, validation_samples=run.validation.count,
                      world_size=context.world_size, effective_batch_size=run.feed.batch_size * context.world_size,
                      total_steps=run.total_steps, resumed_from=run.resumed_from,
                      skipped_checkpoints=[f"{path}: {reason}" for path, reason in run.skipped_checkpoints],
                      nothing_to_resume=start.nothing_to_resume,
                      notes=run.notes))
    return _train_and_evaluate(run, notify)


def _prepare(start: RunStart, inputs: FolderInputs, context: distributed.DistributedContext) -> _Run:
    config, saved = start.config, start.state  # a resumed run's config holds what its `auto` chose
    device = context.device
    torch.manual_seed(config.seed)
    data = open_training_data(inputs.data, inputs.validation, config.validation_fraction, config.seed, config.count,
                              data_label=inputs.labels.get("data"), validation_label=inputs.labels.get("validation"))
    augments = choose_augments(data, config.image_size)
    sample_shape = augments.sample_shape
    classes = len(data.train.classes)
    model = build_model(config.model, sample_shape, classes, config.hidden, config.width)
    precision = choose_precision(config.precision, model, device, sample_shape, classes)
    if saved is not None and not (config.explicit is None or "precision" in config.explicit):
        kept = saved.get("precision_reason") or "as the run chose it"
        precision = Precision(precision.name, f"{kept}; kept from the resumed run")
    model = prepare_model(model, precision, device)
    samples_per_rank = len(data.train_indices if data.train_indices is not None else data.train) // context.world_size
    batch_size = choose_batch_size(config.batch_size, model, precision, device, sample_shape, classes,
                                   limit=samples_per_rank)
    set_by_user = config.batch_size != "auto" and (config.explicit is None or "batch_size" in config.explicit)
    batch_size, batch_note = fit_batch_to_data(batch_size, samples_per_rank, set_by_user)
    config = replace(config, batch_size=batch_size, precision=precision.name,
                     learning_rate=config.peak_learning_rate)  # the values used, as saved and shown
    common = dict(device=device, dtype=precision.input_dtype, rank=context.rank, world_size=context.world_size,
                  workers=config.workers)
    feed = Feed(data.train, batch_size, seed=config.seed, indices=data.train_indices, augment=augments.train,
                image_size=augments.image_size, **common)
    validation = Feed(data.validation, batch_size, shuffle=False, augment=augments.validation, drop_last=False,
                      indices=data.validation_indices, image_size=augments.image_size, **common)
    total_steps = config.total_steps(len(feed))
    optimizer = make_optimizer("adamw", model.parameters(), config.peak_learning_rate, config.weight_decay)
    trained = torch.compile(model) if config.compile else model
    trained = distributed.wrap(trained, context)
    scaler = precision.scaler(device.type)
    step = TrainStep(trained, optimizer, precision, device.type, scaler, label_smoothing=config.label_smoothing)
    files = RunFiles(Path(config.out)) if (config.out and context.is_main) else None
    run = _Run(config, context, model, trained, optimizer, scaler, precision, step, feed, validation,
               total_steps, files, skipped_checkpoints=list(start.skipped),
               notes=tuple(dict.fromkeys(note for note in (batch_note, *feed.notes, *validation.notes) if note)),
               data_description=data.description, folder_keys=dict(inputs.keys))
    if saved is not None:
        _restore(run, saved)
        run.resumed_from = str(start.checkpoint)
    if files is not None:
        files.write_config(config.to_dict() | {"device": str(device), "precision_reason": precision.reason,
                                              "world_size": context.world_size})
    return run


def _restore(run: _Run, state: dict) -> None:
    run.model.load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    if run.scaler is not None and state.get("scaler"):
        run.scaler.load_state_dict(state["scaler"])
    run.feed.load_state_dict(state["feed"])
    restore_rng(state["rng"])
    run.step = int(state["step"])


def _checkpoint(run: _Run) -> None:
    if run.files is None:
        distributed.barrier(run.context)
        return
    config = run.config.to_dict()
    config["hidden"] = list(config["hidden"])
    state = {"format": 1, "model": run.model.state_dict(), "optimizer": run.optimizer.state_dict(),
             "scaler": run.scaler.state_dict() if run.scaler is not None else None, "rng": capture_rng(),
             "feed": run.feed.state_dict(), "step": run.step, "epoch": run.feed.epoch, "config": config,
             "precision_reason": run.precision.reason, "folder_keys": dict(run.folder_keys)}
    run.last_checkpoint = str(save_checkpoint(run.files.checkpoints, run.step, state))
    run.last_checkpoint_step = run.step
    distributed.barrier(run.context)


def _train_step(run: _Run, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    for group in run.optimizer.param_groups:
        group["lr"] = learning_rate_at(run.step, run.total_steps, run.config.peak_learning_rate,
                                       run.config.warmup_fraction)
    return run.train_step(images, labels)


class _Interval:
    """Sums over one log interval: seconds, waits, device time, loss."""

    def __init__(self, device: torch.device):
        self.started = time.perf_counter()
        self.wait = Stopwatch()
        self.busy = DeviceBusyTimer(device)
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        self.samples = 0
        self.steps = 0


def _log(run: _Run, interval: _Interval, totals: dict, notify) -> _Interval:
    seconds = time.perf_counter() - interval.started
    loss = interval.loss_sum.item() / max(1, interval.steps)
    if not math.isfinite(loss):
        raise RunFailed(f"the loss became {loss} by step {run.step} (checked every {run.config.log_every_steps} "
                        f"steps); lower --lr, or train in --precision fp32")
    wait_s, busy_s = interval.wait.take(), interval.busy.collect()
    sample = run.sampler.take()
    samples = interval.samples * run.context.world_size
    totals["seconds"] += seconds
    totals["wait_s"] += wait_s
    totals["samples"] += samples
    if busy_s is not None:
        totals["busy_s"] = totals.get("busy_s", 0.0) + busy_s
    if sample.gpu_utilization_percent is not None:
        totals.setdefault("gpu_utilization", []).append(sample.gpu_utilization_percent)
    record = StepLog(epoch=run.feed.epoch, step=run.step, total_steps=run.total_steps, loss=loss,
                     samples_per_s=samples / seconds, data_wait_fraction=wait_s / seconds,
                     device_busy_fraction=None if busy_s is None else min(1.0, busy_s / seconds),
                     gpu_utilization_percent=sample.gpu_utilization_percent, cpu_percent=sample.cpu_percent,
                     learning_rate=run.optimizer.param_groups[0]["lr"], seconds=totals["seconds"],
                     sm_activity_percent=sample.sm_activity_percent)
    if run.files is not None:
        run.files.append_metrics(record)
    totals["timeline"].append(record)
    notify(record)
    return _Interval(run.context.device)


def _run_epochs(run: _Run, notify) -> dict:
    """The loop. `totals` sums the log intervals; its `per_step` (TrainResult.per_step) holds each step's wall time
    from the previous step's end (the loop's start for the first) to its own, read on the host right after the
    step returns (no synchronisation: on CUDA, host time between step ends), the waits for its batch (the same
    Stopwatch blocks the intervals sum, an epoch's last empty read included) and its samples over all ranks."""
    config, device = run.config, run.context.device
    per_step = {"wall_s": [], "data_wait_s": [], "samples": []}
    totals = {"seconds": 0.0, "wait_s": 0.0, "samples": 0, "timeline": [], "per_step": per_step}
    interval = _Interval(device)
    step_end_s, step_wait_s = interval.started, 0.0
    check_every_step = device.type == "cpu"  # reading the loss costs nothing there
    vote = distributed.StopVote(run.context)
    while run.step < run.total_steps and not run.stopped:
        run.feed.set_epoch(run.feed.epoch)
        batches = iter(run.feed)
        while run.step < run.total_steps:
            with interval.wait:
                batch = next(batches, None)
            step_wait_s += interval.wait.last_s
            if batch is None:
                break
            interval.busy.start()
            loss = _train_step(run, *batch)
            interval.busy.stop()
            now = time.perf_counter()
            per_step["wall_s"].append(now - step_end_s)
            per_step["data_wait_s"].append(step_wait_s)
            per_step["samples"].append(len(batch[1]) * run.context.world_size)
            step_end_s, step_wait_s = now, 0.0
            run.step += 1
            interval.loss_sum += loss
            interval.samples += len(batch[1])
            interval.steps += 1
            if check_every_step and not math.isfinite(loss.item()):
                raise RunFailed(f"the loss became {loss.item()} at step {run.step}; lower --lr, or train in "
                                f"--precision fp32")
            if run.step % config.log_every_steps == 0:
                interval = _log(run, interval, totals, notify)
            if config.checkpoint_every_steps and run.step % config.checkpoint_every_steps == 0:
                _checkpoint(run)
            if vote.decide(run.signals.received is not None):
                run.stopped = True
                break
        batches.close()
        if interval.steps:
            interval = _log(run, interval, totals, notify)
        if not (run.stopped and run.last_checkpoint_step == run.step):  # not twice at the step it stops at
            _checkpoint(run)
    vote.close()
    return totals


def _reduced_shares(run: _Run, totals: dict) -> tuple[float, float | None]:
    """Data-wait and device-busy shares averaged over the ranks (each rank's share of its own wall time)."""
    seconds = max(totals["seconds"], 1e-9)
    busy = totals.get("busy_s")
    wait_share, busy_share = distributed.all_reduce_sum(
        run.context, [totals["wait_s"] / seconds, -1.0 if busy is None else busy / seconds])
    world = run.context.world_size
    return wait_share / world, None if busy is None else min(1.0, busy_share / world)


def _train_and_evaluate(run: _Run, notify) -> TrainResult:
    started = time.perf_counter()
    start_step = run.step
    run.sampler = Sampler(run.context.device)
    try:
        totals = _run_epochs(run, notify)
    finally:
        run.sampler.close()
    if run.stopped:
        raise Interrupted(run.signals.received or "a signal on another rank", run.step, run.total_steps,
                          run.last_checkpoint if run.files is not None else None, run.config.out)
    accuracy, loss = evaluate(run.model, run.validation, run.precision, run.context)
    seconds = time.perf_counter() - started
    wait_share, busy_share = _reduced_shares(run, totals)
    utilization = totals.get("gpu_utilization")
    unmeasured = list(run.sampler.unmeasured)
    if run.context.device.type != "cuda":
        unmeasured.append("device busy share: measured with CUDA events, and the device is not a CUDA GPU")
    result = TrainResult(
        validation_accuracy=accuracy, validation_loss=loss, epochs=run.config.epochs, steps=run.step,
        steps_this_run=run.step - start_step, samples_per_s=totals["samples"] / max(totals["seconds"], 1e-9),
        data_wait_fraction=wait_share, device_busy_fraction=busy_share,
        gpu_utilization_percent=sum(utilization) / len(utilization) if utilization else None,
        peak_memory_bytes=peak_memory_bytes(run.context.device), device=str(run.context.device),
        precision=run.precision.name, precision_reason=run.precision.reason, world_size=run.context.world_size,
        batch_size=run.feed.batch_size,
        effective_batch_size=run.feed.batch_size * run.context.world_size,
        learning_rate=run.config.peak_learning_rate, seconds=seconds, model=run.config.model,
        parameters=parameter_count(run.model), resumed_from=run.resumed_from, out=run.config.out,
        config=run.config.to_dict(), verdict="", unmeasured=unmeasured, timeline=totals["timeline"],
        steps_per_epoch=len(run.feed), notes=list(run.notes), train_samples=run.feed.count,
        validation_samples=run.validation.count, data_description=run.data_description,
        per_step=totals["per_step"])
    result = replace(result, verdict=verdict(result))
    if run.files is not None:
        run.files.save_model(run.model)
        run.files.write_summary(json.loads(json.dumps(result.to_dict(), default=str)))
    return result
