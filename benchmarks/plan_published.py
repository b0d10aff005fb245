"""The planner's step times against NVIDIA's published single-GPU training throughput, and the fit behind them.

    python benchmarks/plan_published.py

For each figure of `gpufeed.plan.published.PUBLISHED` (NVIDIA DeepLearningExamples, PyTorch ResNet-50 v1.5 and
ResNeXt-101 32x4d, A100 80GB and V100 16GB, pytorch-21.03 container; the source of each row is printed): the step
traced on fake tensors at the published batch size, precision and layout (SGD), its roofline time on the catalog
row at the default efficiencies, images/s against the published figure, and the band. Then the fit: the
(compute, memory) efficiency pair on a 0.01 grid with the smallest largest error on the ResNet-50 figures,
what it gives on the held-out ResNeXt figures, and each ResNet-50 figure predicted from a fit to the other three.
Last, a user's model file as `gpufeed plan --model FILE.py:factory` traces it (`plan.run.trace_options`): the
same two models from a file, NCHW by default and with `--channels-last`, against the published channels_last
(NHWC, mixed-precision) figures. Nothing is timed here: every figure is arithmetic on a trace, the same on any
machine with the same torch.
"""

from __future__ import annotations

import itertools
import math
import platform

import torch

from gpufeed.hardware.catalog import match_gpu
from gpufeed.plan.published import PUBLISHED, resnext101_32x4d
from gpufeed.plan.roofline import DEFAULT_EFFICIENCY, Efficiency, step_time
from gpufeed.plan.traffic import trace_traffic
from gpufeed.train.models import build_model

SHAPE = (3, 224, 224)
FACTORIES = {"resnet50": lambda: build_model("resnet50", SHAPE, 1000), "resnext101-32x4d": resnext101_32x4d}
GRID = [step / 100 for step in range(10, 101)]


def rates(traces, figures, efficiency):
    return [figure.batch_size / step_time(traces[figure], match_gpu(figure.gpu), efficiency).seconds
            for figure in figures]


def worst(traces, figures, compute, memory):
    predicted = rates(traces, figures, Efficiency(compute, memory, 1.0, 1.0, "fit"))
    return max(abs(math.log(rate / figure.images_per_s)) for rate, figure in zip(predicted, figures, strict=True))


def fit(traces, figures):
    return min(itertools.product(GRID, GRID), key=lambda pair: worst(traces, figures, *pair))


USER_FILE = """from gpufeed.plan.published import resnext101_32x4d
from gpufeed.train.models import build_model


def resnet50():
    return build_model("resnet50", (3, 224, 224), 1000)
"""


def users_file_rows() -> None:
    """The published NHWC figures planned as a user's model file, by the planner's own trace options."""
    import tempfile
    from pathlib import Path

    from gpufeed.plan.run import PlanRequest, layout_of, model_factory, trace_options

    names = {"resnet50": "resnet50", "resnext101-32x4d": "resnext101_32x4d"}
    print("\n| model, from a file | GPU | precision | batch | planned layout | published img/s (NHWC) | "
          "predicted img/s | error |")
    print("|---|---|---|---:|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "user_models.py"
        path.write_text(USER_FILE, encoding="utf-8")
        for figure in (figure for figure in PUBLISHED if figure.channels_last):
            for channels_last in (None, True):
                request = PlanRequest(model=f"{path}:{names[figure.model]}", input_shape=SHAPE, num_classes=1000,
                                      batch_size=figure.batch_size, precision=figure.precision,
                                      optimizer="sgd", channels_last=channels_last)
                factory = model_factory(request.model, SHAPE, 1000)
                traffic = trace_traffic(factory, SHAPE, figure.batch_size, 1000, figure.precision, "sgd",
                                        **trace_options(request))
                rate = figure.batch_size / step_time(traffic, match_gpu(figure.gpu), DEFAULT_EFFICIENCY).seconds
                flag = " (--channels-last)" if channels_last else " (default)"
                print(f"| {figure.model} | {figure.gpu} | {figure.precision} | {figure.batch_size} | "
                      f"{layout_of(request)}{flag} | {figure.images_per_s:,.0f} | {rate:,.0f} | "
                      f"{rate / figure.images_per_s - 1:+.1%} |")


def main() -> None:
    print(f"torch {torch.__version__}, Python {platform.python_version()}, {platform.machine()}")
    traces = {figure: trace_traffic(FACTORIES[figure.model], SHAPE, figure.batch_size, 1000, figure.precision,
                                    "sgd", channels_last=figure.channels_last) for figure in PUBLISHED}
    print("| model | GPU | precision | batch | layout | published img/s | predicted img/s | error | band img/s | "
          "compute / memory / transposes ms | used to fit |")
    print("|---|---|---|---:|---|---:|---:|---:|---|---|---|")
    for figure in PUBLISHED:
        timed = step_time(traces[figure], match_gpu(figure.gpu), DEFAULT_EFFICIENCY)
        rate = figure.batch_size / timed.seconds
        band = f"{figure.batch_size / timed.seconds_slow:,.0f}-{figure.batch_size / timed.seconds_fast:,.0f}"
        print(f"| {figure.model} | {figure.gpu} | {figure.precision} | {figure.batch_size} | "
              f"{'NHWC' if figure.channels_last else 'NCHW'} | {figure.images_per_s:,.0f} | {rate:,.0f} | "
              f"{rate / figure.images_per_s - 1:+.1%} | {band} | {timed.compute_bound_s * 1e3:.1f} / "
              f"{timed.memory_bound_s * 1e3:.1f} / {timed.layout_s * 1e3:.1f} | {'yes' if figure.fitted else 'no'} |")
    fitted = [figure for figure in PUBLISHED if figure.fitted]
    held_out = [figure for figure in PUBLISHED if not figure.fitted]
    compute, memory = fit(traces, fitted)
    print(f"fit on the ResNet-50 figures: compute {compute}, memory {memory}, largest error "
          f"{math.exp(worst(traces, fitted, compute, memory)) - 1:.1%}; on the held-out ResNeXt figures "
          f"{math.exp(worst(traces, held_out, compute, memory)) - 1:.1%}")
    for left_out in fitted:
        others = [figure for figure in fitted if figure is not left_out]
        pair = fit(traces, others)
        (rate,) = rates(traces, [left_out], Efficiency(*pair, 1.0, 1.0, "fit"))
        print(f"  fitted without {left_out.model} {left_out.gpu} {left_out.precision}: {pair}, its error "
              f"{rate / left_out.images_per_s - 1:+.1%}")
    for figure in PUBLISHED:
        print(f"  source: {figure.source}")
    users_file_rows()


if __name__ == "__main__":
    main()
