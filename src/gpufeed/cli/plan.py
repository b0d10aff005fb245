"""gpufeed plan: what hardware a training needs, and which GPU to buy or rent."""

from __future__ import annotations

import argparse

from rich.table import Table

from gpufeed.cli.output import (
    add_html_flag,
    add_json_flag,
    check_output_paths,
    console,
    emit_document,
    error_console,
)
from gpufeed.errors import ConfigError

EXAMPLES = """examples:
  gpufeed plan --model resnet18 --input 3x224x224 --classes 1000 --batch-size 256 --dataset-size 1281167 --epochs 90
  gpufeed plan --model cnn --data train.gpuf --epochs 20 --gpus 4 --target-hours 1
  gpufeed plan --model mymodels.py:make_net --input 3x64x64 --optimizer sgd --precision fp32 --json plan.json
  gpufeed plan --model resnet18 --html plan.html  # a page: memory parts against each GPU, time and cost

Memory is traced from one real training step on fake tensors (nothing is allocated); FLOPs from
torch.utils.flop_counter; times use each GPU's dense peak from hardware/gpus.json times a model-FLOPs
utilisation measured on this machine's GPU when there is one, else a stated default, with a band.
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser("plan", help="the GPU memory, host and GPUs a training needs",
                                   description="Device memory itemized, compute, host RAM, cores, disk and power "
                                               "supply, and the catalog's GPUs ranked by time and cost.",
                                   epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="mlp | cnn | resnet18 | resnet50 | path/to/file.py:factory")
    parser.add_argument("--input", default=None, help="one sample's shape, CxHxW (default 3x32x32, or from --data)")
    parser.add_argument("--classes", type=int, default=None, help="number of classes (default 10, or from --data)")
    parser.add_argument("--batch-size", type=int, default=256,
                        help="per GPU (per micro-batch with --grad-accumulation)")
    parser.add_argument("--grad-accumulation", type=int, default=1, metavar="K",
                        help="micro-batches per optimizer step, gradients summed across them (default 1)")
    parser.add_argument("--optimizer", default="adamw", help="sgd | adam | adamw")
    parser.add_argument("--precision", default="bf16", help="fp32 | bf16 | fp16 | fp64")
    parser.add_argument("--dataset-size", type=int, default=None, help="samples per epoch (default 50000)")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--target-hours", type=float, default=None)
    parser.add_argument("--data", help="a packed dataset: its shape, classes and size fill the defaults")
    parser.add_argument("--image-size", type=int, metavar="N",
                        help="the N x N crops a --data packed with --max-side (sizes differ) is trained at")
    parser.add_argument("--gpu", dest="host_gpu", help="plan the host around this GPU (default: the best that fits)")
    parser.add_argument("--check", action="store_true", help="also run the step here and compare")
    add_json_flag(parser)
    add_html_flag(parser)
    parser.set_defaults(handler=run)


def _request(args):
    from gpufeed.plan.run import PlanRequest, parse_input_shape

    shape, classes, size, stored = (3, 32, 32), 10, 50_000, None
    if args.data:
        shape, classes, size, stored = _data_defaults(args)
    if args.input:
        shape = parse_input_shape(args.input)
    return PlanRequest(model=args.model, input_shape=shape, num_classes=args.classes or classes,
                       batch_size=args.batch_size, optimizer=args.optimizer, precision=args.precision,
                       dataset_size=args.dataset_size or size, epochs=args.epochs, gpus=args.gpus,
                       target_hours=args.target_hours, bytes_per_sample=stored, host_gpu=args.host_gpu,
                       grad_accumulation=args.grad_accumulation)


def _data_defaults(args) -> tuple[tuple[int, int, int], int, int, int]:
    """Input shape (C, H, W), classes, samples and stored bytes per sample from --data (and --image-size)."""
    from gpufeed.data.format import read_header

    header = read_header(args.data)
    if args.image_size is not None and args.image_size <= 0:
        raise ConfigError(f"--image-size must be a positive number of pixels, got {args.image_size}")
    if args.image_size is not None:
        height = width = args.image_size
    elif header.is_fixed_size:
        height, width, _ = header.shape
    elif args.input is None:
        most_height, most_width, _ = header.max_shape
        raise ConfigError(f"--data {args.data} holds images of different sizes (up to {most_height}x{most_width}); "
                          f"give the size they are trained at with --image-size N (or --input CxHxW)")
    else:
        height, width = header.max_shape[:2]  # replaced by --input
    stored = round(header.stored_bytes_per_sample)
    return (header.channels, height, width), len(header.classes), header.count, stored


def _gib(value) -> str:
    return "NA" if value is None else f"{value / 2**30:,.2f} GiB"


def _show(plan) -> None:
    from gpufeed.plan.rank import duration_text

    memory = plan.memory
    request = plan.request
    batch = (f"batch {request.batch_size} per GPU" if request.grad_accumulation == 1 else
             f"micro-batch {request.batch_size} x {request.grad_accumulation} per GPU")
    console.print(f"[bold]{request.model}[/bold]: {plan.params:,} parameters, input {request.input_shape}, "
                  f"{batch}, {request.optimizer}, {request.precision}")
    console.print(f"loop planned: {memory.step_order}")
    table = Table(title="device memory per GPU (traced on fake tensors)")
    table.add_column("part")
    table.add_column("bytes", justify="right")
    for name in ("weights", "gradients", "optimizer", "activations", "overhead", "peak"):
        table.add_row(name, _gib(getattr(memory, f"{name}_bytes")))
    console.print(table)
    by_order = memory.peak_bytes_by_order
    console.print(f"peak by loop order: gradients freed before the forward {_gib(by_order['grads_freed'])}, "
                  f"gradients live through it (accumulation) {_gib(by_order['grads_live'])}")
    compute = plan.compute
    console.print(f"compute: {plan.flops_per_step:,} FLOPs per step, {compute.total_steps:,} steps; MFU "
                  f"{compute.mfu:.2f} ({compute.mfu_low:.2f}-{compute.mfu_high:.2f}): {compute.mfu_source}")
    host = plan.host
    console.print(f"host around {plan.request.gpus} x {plan.host_gpu}:")
    console.print(f"  RAM {_gib(host.ram_bytes)} (at least {_gib(host.ram_minimum_bytes)}): {host.ram_reason}")
    console.print(f"  CPU cores {host.cpu_cores}: {host.cpu_reason}")
    console.print(f"  disk {_gib(host.disk_bytes)}: {host.disk_reason}")
    console.print(f"  power supply {host.psu_watts} W: {host.psu_arithmetic}")
    for note in host.link_notes:
        console.print(f"  link: {note}")
    ranking = Table(title="GPUs ranked")
    for column in ("GPU", "fits", "max batch", "time (band)", "buy (USD)", "rent (USD)", "energy kWh", "notes"):
        ranking.add_column(column)
    for option in plan.gpus:
        hours = "NA" if option.hours is None else (f"{duration_text(option.hours)} ({duration_text(option.hours_low)}"
                                                   f" to {duration_text(option.hours_high)})")
        ranking.add_row(option.name, "yes" if option.fits else "no", str(option.max_batch_size), hours,
                        "NA" if option.cost_buy_usd is None else f"{option.cost_buy_usd:,.0f}",
                        "NA" if option.cost_rent_usd is None else f"{option.cost_rent_usd:,.0f}",
                        "NA" if option.energy_kwh is None else f"{option.energy_kwh:,.1f}", option.notes)
    console.print(ranking)
    console.print(f"[bold]recommendation[/bold]: {plan.recommendation}")
    for line in plan.unmeasured:
        console.print(f"[dim]not measured: {line}[/dim]")


def run(args) -> int:
    from gpufeed.plan.run import make_plan, plan_json

    if args.gpus is not None and args.gpus <= 0:
        raise ConfigError(f"--gpus must be positive, got {args.gpus}")
    check_output_paths(args, inputs=(args.data,) if args.data else ())
    status = error_console if args.json == "-" else console
    with status.status("planning: tracing one training step on fake tensors"):
        plan = make_plan(_request(args))
    document = plan_json(plan)
    if args.check:
        from gpufeed.plan.check import check_plan

        with status.status(f"checking: running {plan.request.model} for 3 steps here, peak memory and time"):
            document["check"] = check_plan(plan)
    if args.json != "-":
        _show(plan)
        if "check" in document:
            for line in document["check"]["lines"]:
                console.print(f"check: {line}")
    emit_document(document, "plan", args)
    return 0
