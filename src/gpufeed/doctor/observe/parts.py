"""The step's compute split on the host clock: the forward of the step's model and the optimizer steps, timed
into the Watcher's step (watch.py) like its data wait. The Instrumentation (hooks.py) owns a `StepParts`.

- the model's forward (`forward_s`): the step's model is the first outermost module called with grad enabled
  (the hooks' forward pre-hook names it, `time_model`); under DDP that is the DistributedDataParallel wrapper.
  A forward pre-hook and an always-called forward hook on that one module instance (not global hooks: those are
  dropped after the first step, hooks.py) read the clock around each of its calls with grad enabled, outermost
  calls only; forwards under torch.no_grad (validation) and the batch probe's (`watcher.probing`) are left out of
  it (a no-grad call's time is told to the Watcher apart, which leaves it out of the loop's input work).
- the loop's own input work (`loop_input_s`, no training DataLoader seen): the start of the step's first call of
  the model with grad enabled, read here, ends it; the Watcher (watch.py) takes it from the step's start.
- the optimizer steps (`optimizer_s`): torch's global optimizer step pre-hook notes when each optimizer's step
  began, and the Instrumentation's post-hook (hooks.py) calls `optimizer_ended` before it ends the step, so a
  step's optimizer time lands in that step; every optimizer counts. A rank's record (ranks/context.py) takes its
  optimizer time from here too.

The rest of the step's compute (`backward_s`: the loss, the backward pass, zero_grad and the loop's own Python,
less its input work when timed) is what the wall time leaves (measure/steps.py: backward_seconds). On CUDA kernels
run asynchronously: these are the host's times in each part, and a part that waits for the device (an .item() in
the loss, the caching allocator) carries that wait. A copy or a host wait made inside the forward counts in both
copy_s/sync_s and forward_s (backward_s is then clamped at 0). Cost: two hook calls per call of the model, two per
optimizer step.
"""

from __future__ import annotations

import time

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook


class StepParts:
    """Times the step's model forward and the optimizer steps into `watcher` (see the module's docstring)."""

    def __init__(self, watcher):
        self.watcher = watcher
        self.model: torch.nn.Module | None = None  # the step's model, once found
        self._handles: list = []
        self._optimizer_started: dict[int, float] = {}  # id(optimizer) -> perf_counter at its step's start
        self._optimizer_depth: dict[int, int] = {}  # id(optimizer) -> its step() calls active now (see below)
        self._model_depth = 0  # calls of the model active now
        self._model_started: float | None = None  # the outermost timed call's start
        self._model_grad = True  # that call runs with grad enabled (a training forward)

    def install(self) -> None:
        self._handles.append(register_optimizer_step_pre_hook(self._on_optimizer_start))
        self.watcher.timing("optimizer")

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles, self.model, self._optimizer_started, self._optimizer_depth = [], None, {}, {}
        self._model_depth, self._model_started = 0, None

    # --- optimizer steps ------------------------------------------------------------------------------------
    def _on_optimizer_start(self, optimizer, args, kwargs) -> None:
        depth = self._optimizer_depth.get(id(optimizer), 0) + 1
        self._optimizer_depth[id(optimizer)] = depth
        if depth == 1:
            self._optimizer_started[id(optimizer)] = time.perf_counter()

    def optimizer_ended(self, optimizer) -> bool:
        """`optimizer`'s step returned (the Instrumentation's post-hook, before the step boundary): True when it is
        the outermost call. torch hooks the `step` of each optimizer class instantiated, so a subclass's `step` that
        calls `super().step()` runs the hooks twice once its base class has had an instance: one step, not two."""
        depth = self._optimizer_depth.pop(id(optimizer), 1) - 1
        if depth > 0:
            self._optimizer_depth[id(optimizer)] = depth
            return False
        started = self._optimizer_started.pop(id(optimizer), None)
        if started is not None:
            self.watcher.on_optimizer_time(time.perf_counter() - started)
        return True

    # --- the model's forward --------------------------------------------------------------------------------
    def time_model(self, module: torch.nn.Module, inputs) -> None:
        """`module` is the step's model, its call now starting (from a global forward pre-hook, which runs before
        the module's own: this call is timed from here)."""
        self.model = module
        self._handles += [module.register_forward_pre_hook(self._on_model_start, with_kwargs=True),
                          module.register_forward_hook(self._on_model_end, always_call=True)]
        self.watcher.timing("forward")
        self._on_model_start(module, inputs, {})

    def _on_model_start(self, module, args, kwargs) -> None:
        self._model_depth += 1
        if self._model_depth == 1 and not self.watcher.probing:
            self._model_grad = torch.is_grad_enabled()
            if self._model_grad:  # before the forward's clock: counting and capturing are not its time
                self.watcher.on_model_call(module, args, kwargs, time.perf_counter())
            self._model_started = time.perf_counter()

    def _on_model_end(self, module, inputs, output) -> None:  # also when the forward raised (always_call)
        self._model_depth = max(0, self._model_depth - 1)
        if self._model_depth == 0 and self._model_started is not None:
            seconds = time.perf_counter() - self._model_started
            if self._model_grad:
                self.watcher.on_forward_time(seconds)
            else:  # validation: not the loop's input work, should it come before the step's forward
                self.watcher.on_no_grad_forward_time(seconds)
            self._model_started = None
