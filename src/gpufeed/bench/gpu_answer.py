"""With no GPU benchmarked: how much faster the bench's CNN training step would run on the catalog's GPUs.

The GPU's step time is the planner's, computed as `gpufeed plan` ranks its GPUs (plan/rank.py): the step traced
once in bf16 as `gpufeed train` runs our models (plan.run.trace_options; plan.traffic.trace_traffic), the roofline
of its operators on each card (plan.roofline.step_time: each operator's FLOPs at the card's dense peak and its
bytes at its bandwidth, at the planner's efficiencies), with the efficiency band. `make_plan` itself is not
called: its memory search over every card's capacity took 28 s on 2 busy cores, half a quick bench. The speed-up
is the CPU's measured median step over that time; its low end uses the slow end of the GPU estimate. Shown: the
FASTEST_SHOWN fastest cards and the fastest consumer card; cards without bf16 (planned in fp16 by the planner)
are left out. `plan` is imported inside `estimate_gpus`, the one function that needs it, so that loading bench does
not load the planner. GpuAnswer and GpuEstimate are results.py's.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufeed.bench.results import GpuAnswer, GpuEstimate, TrainStepResult
from gpufeed.bench.steps import CLASSES, SAMPLE_SHAPE
from gpufeed.hardware.na import NA, is_na
from gpufeed.units import bytes_text

GPU_PRECISION = "bf16"  # what gpufeed train picks on a GPU that has it
FASTEST_SHOWN = 3
ANSWER_BATCH = 256
# Under this the estimate is flattering: a training step launches a few hundred kernels (forward, backward, the
# optimizer), each some microseconds of launch and synchronisation that no roofline counts. gpufeed's round figure.
LAUNCH_BOUND_S = 1e-3


def cpu_step_to_beat(steps: Sequence[TrainStepResult], model: str = "cnn",
                     batch_size: int = ANSWER_BATCH) -> TrainStepResult | None:
    """The fastest CPU step measured for `model` at `batch_size`, in any precision."""
    found = [s for s in steps if s.device == "cpu" and s.model == model and s.batch_size == batch_size]
    return min(found, key=lambda s: s.seconds_median, default=None)


def estimate_gpus(cpu_step: TrainStepResult, catalog=None, shown: int = FASTEST_SHOWN,
                  gpu_present: bool = False) -> GpuAnswer | NA:
    """The planner's step time for `cpu_step`'s model and batch on the fastest catalog cards and the fastest
    consumer card, each as a speed-up over the CPU's measured median, or NA with the reason."""
    from gpufeed.hardware.catalog import load_catalog
    from gpufeed.plan.compute import efficiency_of, estimate_compute
    from gpufeed.plan.rank import planned_precision
    from gpufeed.plan.roofline import step_time
    from gpufeed.plan.run import PlanRequest, trace_options
    from gpufeed.plan.traffic import trace_traffic
    from gpufeed.train.models import build_model

    batch = cpu_step.batch_size
    request = PlanRequest(model=cpu_step.model, input_shape=SAMPLE_SHAPE, num_classes=CLASSES, batch_size=batch,
                          precision=GPU_PRECISION, dataset_size=batch, epochs=1)  # one step

    def factory():
        return build_model(cpu_step.model, SAMPLE_SHAPE, CLASSES)

    traffic = trace_traffic(factory, SAMPLE_SHAPE, batch, CLASSES, GPU_PRECISION, request.optimizer,
                            **trace_options(request))
    compute = estimate_compute(factory(), SAMPLE_SHAPE, batch, CLASSES, batch, 1, traffic)
    estimates = []
    for spec in load_catalog() if catalog is None else catalog:
        step = step_time(traffic, spec, efficiency_of(compute))
        if planned_precision(spec, GPU_PRECISION)[0] != GPU_PRECISION or is_na(step):
            continue
        estimates.append(GpuEstimate(spec.name, spec.form_factor, step.seconds, step.seconds_fast,
                                     step.seconds_slow, cpu_step.seconds_median / step.seconds,
                                     cpu_step.seconds_median / step.seconds_slow,
                                     cpu_step.seconds_median / step.seconds_fast))
    if not estimates:
        return NA(f"no catalog GPU has the {GPU_PRECISION} rates the planner needs")
    estimates.sort(key=lambda e: e.step_s)
    chosen = estimates[:shown]
    consumer = next((e for e in estimates if e.form_factor == "consumer"), None)
    if consumer is not None and consumer not in chosen:
        chosen.append(consumer)
    return GpuAnswer(model=cpu_step.model, batch_size=batch, cpu_precision=cpu_step.precision,
                     cpu_step_s=cpu_step.seconds_median, gpu_precision=GPU_PRECISION,
                     flops_per_step=compute.flops_per_step, bytes_per_step=compute.bytes_per_step,
                     efficiency_source=compute.efficiency_source, estimates=chosen, gpu_present=gpu_present)


def factor_text(value: float) -> str:
    """12345.6 -> '12,000'; 431 -> '430'; 42.3 -> '42'; 3.14 -> '3.1': two significant figures."""
    if value >= 10:
        digits = len(str(int(value))) - 2
        return f"{round(value, -digits):,.0f}"
    return f"{value:.1f}"


def answer_sentence(answer: GpuAnswer) -> str:
    """'No GPU here: this CNN training step ... would run about 40x (20-70x) faster on the ...'."""
    where = "No GPU was benchmarked" if answer.gpu_present else "No GPU here"
    cards = [f"{factor_text(e.speedup)}x ({factor_text(e.speedup_low)}-{factor_text(e.speedup_high)}x) faster on "
             f"the {'consumer ' if e.form_factor == 'consumer' else ''}{e.gpu}" for e in answer.estimates]
    listed = ", ".join(cards[:-1]) + (" and " if len(cards) > 1 else "") + cards[-1]
    short = min(e.step_s for e in answer.estimates) < LAUNCH_BOUND_S
    caveat = ("; a step under a millisecond also waits on kernel launches, which the roofline leaves out, so read "
              "these as the high end" if short else "")
    return (f"{where}: this {answer.model.upper()} training step (batch {answer.batch_size}, "
            f"{answer.cpu_step_s * 1e3:,.0f} ms on this CPU in {answer.cpu_precision}) would run about {listed} "
            f"(gpufeed plan's roofline in {answer.gpu_precision}: the step's {answer.flops_per_step / 1e9:.1f} "
            f"GFLOPs and {bytes_text(answer.bytes_per_step, 'GB', 2, grouped=False)} at each card's peak and "
            f"bandwidth{caveat}).")
