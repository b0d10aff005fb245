"""gpufeed plan: what hardware a training needs, and which GPU to buy or rent."""

from __future__ import annotations

import argparse

from rich import box
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
from gpufeed.units import NA, bytes_text, duration_text, fixed, rate_text, size_text

EXAMPLES = """examples:
  gpufeed plan --model resnet18 --input 3x224x224 --classes 1000 --batch-size 256 --dataset-size 1281167 --epochs 90
  gpufeed plan --model cnn --data train.gpuf --epochs 20 --gpus 4 --target-hours 1
  gpufeed plan --model mymodels.py:make_net --input 3x64x64 --optimizer sgd --precision fp32 --json plan.json
  gpufeed plan --model resnet50 --input 3x224x224 --classes 1000 --precision tf32 --gpu a100 80gb sxm
  gpufeed plan --model resnet18 --html plan.html  # a page: memory parts against each GPU, time and cost

Memory is traced from one real training step on fake tensors (nothing is allocated); FLOPs from
torch.utils.flop_counter and bytes from the same trace; a step's time on each GPU is the sum over its operators
of the longer of FLOPs at the card's peak and bytes at its memory bandwidth (hardware/gpus.json), at
efficiencies fitted to NVIDIA's published ResNet-50 throughput or scaled to a step measured on this machine's
GPU, with a band. To buy, SXM/OAM GPUs come as 4- or 8-GPU servers; to rent, any count, priced per GPU-hour.
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser("plan", help="the GPU memory, host and GPUs a training needs",
                                   description="Device memory itemized, compute, host RAM, cores, disk and power "
                                               "supply, and the catalog's GPUs ranked by time and cost.",
                                   epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    chosen = parser.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--model", help="mlp | cnn | resnet18 | resnet50 | path/to/file.py:factory (images); a "
                                         "language model: a catalog name (--list-models), a config.json or its "
                                         "folder, a model id in the local Hugging Face cache, or file.py:factory "
                                         "with --seq-len")
    chosen.add_argument("--list-models", action="store_true",
                        help="list the catalog's language models (configuration facts with their sources) and exit")
    language = parser.add_argument_group("language models (pip install 'gpufeed[lm]')")
    language.add_argument("--seq-len", type=int, metavar="N",
                          help="tokens per sequence (default min(2048, the model's positions)); the batch is "
                               "--batch-size sequences (default 1 for a language model)")
    language.add_argument("--method", choices=("full", "lora", "qlora"), default=None,
                          help="full fine-tune (default), LoRA through peft, or QLoRA (a 4-bit NF4 base)")
    language.add_argument("--lora-rank", type=int, default=None, metavar="R", help="LoRA's rank (default 16)")
    language.add_argument("--lora-alpha", type=int, default=None, help="LoRA's alpha (default twice the rank)")
    language.add_argument("--lora-targets", default=None, metavar="NAMES",
                          help="comma-separated module names LoRA adapts (default: peft's for the model type)")
    language.add_argument("--activation-checkpointing", action="store_true",
                          help="recompute each layer in the backward (the model's gradient_checkpointing_enable)")
    language.add_argument("--frozen-dtype", choices=("bf16", "fp16", "fp32"), default=None,
                          help="with lora or qlora: the dtype of the frozen base's weights (default bf16)")
    language.add_argument("--shard", choices=("ddp", "zero1", "zero2", "zero3", "fsdp", "hsdp"), default=None,
                          help="spread over --gpus: ddp copies, DeepSpeed's ZeRO stages, torch's FSDP2, or HSDP "
                               "(FSDP within a node, copies across nodes); memory is then per GPU")
    language.add_argument("--gpus-per-node", type=int, default=None, metavar="K",
                          help="GPUs in one machine (default min(--gpus, 8)); links between machines are the network")
    language.add_argument("--offload", choices=("none", "optimizer", "parameters"), default="none",
                          help="with --shard: move the optimizer state (and with parameters, the weights and "
                               "gradients) to host RAM")
    language.add_argument("--tokens", type=float, default=None, metavar="N",
                          help="the job's tokens, all GPUs together, e.g. 2e9 (default 1e9): its hours and cost")
    parser.add_argument("--input", default=None, help="one sample's shape, CxHxW (default 3x32x32, or from --data)")
    parser.add_argument("--classes", type=int, default=None, help="number of classes (default 10, or from --data)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="per GPU (per micro-batch with --grad-accumulation); default 256 images, 1 sequence")
    parser.add_argument("--grad-accumulation", type=int, default=1, metavar="K",
                        help="micro-batches per optimizer step, gradients summed across them (default 1)")
    parser.add_argument("--optimizer", default="adamw",
                        help="sgd | adam | adamw; for a language model also adafactor (transformers') and adamw-8bit "
                             "(bitsandbytes' state)")
    parser.add_argument("--precision", default="bf16",
                        help="bf16 | fp16 | fp32 | tf32 (TF32 matrix products and convolutions) | fp64; bf16 "
                             "falls back to fp16 with a scaler on GPUs without it; for a language model also "
                             "bf16-true (weights, gradients and optimizer state in bf16)")
    parser.add_argument("--dataset-size", type=int, default=None,
                        help="samples per epoch (default 50000); for a language model, sequences of --seq-len tokens: "
                             "the job's tokens are then dataset size x epochs x seq-len (instead of --tokens)")
    parser.add_argument("--epochs", type=int, default=10,
                        help="passes over the dataset (default 10); for a language model with --dataset-size")
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--target-hours", type=float, default=None)
    parser.add_argument("--data", help="a packed dataset: its shape, classes and size fill the defaults")
    parser.add_argument("--image-size", type=int, metavar="N",
                        help="the N x N crops a --data packed with --max-side (sizes differ) is trained at")
    parser.add_argument("--gpu", dest="host_gpu",
                        help="plan the machine to buy around this GPU, named loosely ('4090', 'h100 sxm'; "
                             "default: the best value to buy; for a language model the cheapest to rent that fits)")
    parser.add_argument("--source-gib", type=float, default=None, metavar="GIB",
                        help="the files the dataset is packed from, GiB, kept on the disk (default: as large as "
                             "the packed dataset)")
    parser.add_argument("--encoding", choices=("jpeg", "raw"),
                        help="without --data: the samples are stored as JPEG (or raw pixels) at --max-side, as "
                             "gpufeed pack --max-side packs photos; sizes the data and measures the decode here")
    parser.add_argument("--max-side", type=int, metavar="N",
                        help="with --encoding: the longest side the images are stored at (default 256)")
    parser.add_argument("--decode", choices=("cpu", "gpu"), default="cpu",
                        help="where the planned machine decodes JPEG samples: the CPU's cores (default) or the GPU "
                             "(nvImageCodec, pip install 'gpufeed[nvjpeg]'); the other case's cores are printed too")
    parser.add_argument("--channels-last", action="store_true", default=None,
                        help="plan a model file's convolutions in channels_last (our models always are; a user's "
                             "file is planned NCHW unless this is given)")
    parser.add_argument("--check", action="store_true", help="also run the step here and compare")
    add_json_flag(parser)
    add_html_flag(parser)
    parser.set_defaults(handler=run)


COMPACT = dict(box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)  # the GPU tables fit 100 columns
IMAGE_ONLY = ("input", "classes", "data", "image_size", "source_gib", "encoding", "max_side",
              "channels_last", "target_hours")
LANGUAGE_ONLY = ("seq_len", "method", "lora_rank", "lora_alpha", "lora_targets", "frozen_dtype", "shard",
                 "gpus_per_node", "tokens")


def is_language_model(args) -> bool:
    """Our image models and a file.py:factory without language-model options are planned as images; anything else
    (a catalog name, a config, a cached id, or a factory with --seq-len) as a language model."""
    from gpufeed.train.models import MODELS

    if args.model in MODELS:
        return False
    path, _, name = args.model.rpartition(":")
    if path.endswith(".py") and name:
        return any(getattr(args, option) not in (None, False) for option in LANGUAGE_ONLY) or \
            args.activation_checkpointing
    return True


def _language_request(args):
    from gpufeed.plan.language.model import FineTune
    from gpufeed.plan.language.run import LanguagePlanRequest
    from gpufeed.plan.language.sharding import Sharding

    given = [f"--{option.replace('_', '-')}" for option in IMAGE_ONLY if getattr(args, option) not in (None, False)]
    given += ["--decode"] if args.decode != "cpu" else []
    if given:
        raise ConfigError(f"{given[0]} goes with image models; a language model's plan takes --seq-len, --batch-size, "
                          f"--method, --optimizer, --precision, --grad-accumulation, --gpus, --shard and --tokens")
    method = args.method or "full"
    targets = tuple(name.strip() for name in args.lora_targets.split(",") if name.strip()) \
        if args.lora_targets else None
    if method == "full" and (args.lora_rank is not None or args.frozen_dtype is not None):
        raise ConfigError("--lora-rank and --frozen-dtype go with --method lora or qlora")
    tune = FineTune(method, args.lora_rank or 16, args.lora_alpha, targets, args.activation_checkpointing)
    if args.gpus > 1 and args.shard is None:
        raise ConfigError(f"--gpus {args.gpus} needs --shard: ddp for copies, zero1/zero2/zero3 or fsdp to shard "
                          f"the state, hsdp across nodes")
    if args.tokens is not None and (args.tokens < 1 or args.tokens != int(args.tokens)):
        raise ConfigError(f"--tokens must be a whole number of tokens, at least 1, got {args.tokens:g}")
    if args.tokens is not None and args.dataset_size is not None:
        raise ConfigError("give the job's size once: --tokens, or --dataset-size (sequences) with --epochs")
    sharding = Sharding(args.shard, args.gpus, args.gpus_per_node, args.offload)
    if args.check and args.shard is not None:
        raise ConfigError("--check runs the one-GPU step here; leave out --shard (a sharded plan's accounting is "
                          "checked against FSDP2 ranks in tests/plan/test_sharding.py)")
    return LanguagePlanRequest(model=args.model, sequence_length=args.seq_len, batch_size=args.batch_size or 1,
                               tune=tune, optimizer=args.optimizer, precision=args.precision,
                               frozen_dtype=args.frozen_dtype or "bf16", grad_accumulation=args.grad_accumulation,
                               sharding=sharding, tokens=None if args.tokens is None else int(args.tokens),
                               host_gpu=args.host_gpu, dataset_sequences=args.dataset_size, epochs=args.epochs)


def _request(args):
    from gpufeed.plan.run import PlanRequest, parse_input_shape

    given = [f"--{option.replace('_', '-')}" for option in LANGUAGE_ONLY if getattr(args, option) is not None]
    if given or args.activation_checkpointing:
        raise ConfigError(f"{(given or ['--activation-checkpointing'])[0]} goes with a language model; "
                          f"{args.model} is planned as an image model")
    shape, classes, size, stored = (3, 32, 32), 10, 50_000, None
    if args.data and args.encoding:
        raise ConfigError("--encoding states how samples are stored when there is no --data; --data's file says "
                          "it: leave --encoding out")
    if args.max_side is not None and (args.max_side <= 0 or not args.encoding):
        raise ConfigError("--max-side N (a positive number of pixels) goes with --encoding jpeg|raw, e.g. "
                          "--encoding jpeg --max-side 256")
    if args.data:
        shape, classes, size, stored = data_defaults(args)
    if args.input:
        shape = parse_input_shape(args.input)
    return PlanRequest(model=args.model, input_shape=shape, num_classes=args.classes or classes,
                       batch_size=args.batch_size or 256, optimizer=args.optimizer, precision=args.precision,
                       dataset_size=args.dataset_size or size, epochs=args.epochs, gpus=args.gpus,
                       target_hours=args.target_hours, bytes_per_sample=stored, host_gpu=args.host_gpu,
                       grad_accumulation=args.grad_accumulation,
                       source_bytes=None if args.source_gib is None else round(args.source_gib * 2**30),
                       data=args.data, encoding=None if args.data else args.encoding, max_side=args.max_side,
                       decode=args.decode, channels_last=args.channels_last)


def data_defaults(args) -> tuple[tuple[int, int, int], int, int, int]:
    """Input shape (C, H, W), classes, samples and stored bytes per sample from --data (and --image-size)."""
    from gpufeed.data.format.header import read_header

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


def _memory(plan) -> None:
    memory, request = plan.memory, plan.request
    batch = (f"batch {request.batch_size} per GPU" if request.grad_accumulation == 1 else
             f"micro-batch {request.batch_size} x {request.grad_accumulation} per GPU")
    from gpufeed.plan.run import layout_of

    console.print(f"[bold]{request.model}[/bold]: {plan.params:,} parameters, input {request.input_shape} "
                  f"{layout_of(request)}, "
                  f"{batch}, {request.optimizer}, {request.precision}")
    console.print(f"loop planned: {memory.step_order}")
    table = Table(title="device memory per GPU (traced on fake tensors)")
    table.add_column("part")
    table.add_column("bytes", justify="right")
    for name in ("weights", "gradients", "optimizer", "activations", "overhead", "peak"):
        table.add_row(name, bytes_text(getattr(memory, f"{name}_bytes"), "GiB", 2))
    console.print(table)
    by_order = memory.peak_bytes_by_order
    freed, live = (bytes_text(by_order[order], "GiB", 2) for order in ("grads_freed", "grads_live"))
    console.print(f"peak by loop order: gradients freed before the forward {freed}, "
                  f"gradients live through it (accumulation) {live}")


def _host(plan) -> None:
    compute, host = plan.compute, plan.host
    console.print(f"compute: {plan.flops_per_step:,} FLOPs and {bytes_text(compute.bytes_per_step)} moved per "
                  f"step, {compute.total_steps:,} steps; efficiencies: compute {compute.compute_efficiency:.2f}, "
                  f"memory {compute.memory_efficiency:.2f} (band x{compute.efficiency_low:.2f}-"
                  f"x{compute.efficiency_high:.2f}): {compute.efficiency_source}")
    console.print(f"to buy around {plan.host_gpu}: {host.system}")
    console.print(f"  RAM at least {bytes_text(host.ram_minimum_bytes, 'GiB', 2)}, "
                  f"ideally {bytes_text(host.ram_bytes, 'GiB', 2)}: {host.ram_reason}")
    console.print(f"  RAM to keep the dataset in the page cache {bytes_text(host.ram_cache_bytes, 'GiB', 2)}: "
                  f"{host.ram_cache_reason}")
    console.print(f"  bytes per sample {host.bytes_per_sample:,}: {host.bytes_reason}")
    decode = "" if host.cpu_cores_other_decode is None else (
        ", decoding on the CPU" if host.decode == "cpu" else ", decoding on the GPU (nvImageCodec)")
    console.print(f"  CPU cores {host.cpu_cores}{decode}: {host.cpu_reason}")
    if host.cpu_cores_other_decode is not None:
        other = "--decode gpu" if host.decode == "cpu" else "--decode cpu"
        console.print(f"  CPU cores {host.cpu_cores_other_decode} with {other}: {host.cpu_other_decode_reason}")
    console.print(f"  disk {bytes_text(host.disk_bytes, 'GiB', 2)}: {host.disk_reason}")
    console.print(f"  power supply {host.psu_watts:,} W: {host.psu_arithmetic}")
    for note in host.link_notes:
        console.print(f"  link: {note}")


def _marks(notes: str, footnotes: dict[str, int]) -> str:
    """A row's notes ('; '-separated) as footnote marks, each distinct note numbered once in `footnotes`."""
    marks = [footnotes.setdefault(note, len(footnotes) + 1) for note in filter(None, notes.split("; "))]
    return ",".join(f"[{mark}]" for mark in marks)


def _print_footnotes(footnotes: dict[str, int]) -> None:
    for note, mark in footnotes.items():
        console.print(f"\\[{mark}] {note}", highlight=False)


def _show(plan) -> None:
    _memory(plan)
    _host(plan)
    ranking = Table(title=f"GPUs ranked ({plan.request.gpus} per run; rent for the job at the catalog's $ per "
                          f"GPU-hour, buy as sold)", **COMPACT)
    for column, justify in (("GPU", "left"), ("fits", "left"), ("batch", "right"), ("samples/s", "right"),
                            ("time", "right"), ("rent $", "right"), ("buy $ (GPUs)", "right"), ("kWh", "right"),
                            ("", "left")):
        ranking.add_column(column, justify=justify)
    footnotes: dict[str, int] = {}
    for option in plan.gpus:
        hours = NA if option.hours is None else duration_text(option.hours)
        buy = NA if option.cost_buy_usd is None else f"{option.cost_buy_usd:,.0f} ({option.buy_gpus})"
        ranking.add_row(option.name.removeprefix("NVIDIA "), "yes" if option.fits else "no",
                        f"{option.max_batch_size:,}", rate_text(option.samples_per_s), hours,
                        fixed(option.cost_rent_usd, 2), buy, fixed(option.energy_kwh, 1),
                        _marks(option.notes, footnotes))
    console.print(ranking)
    _print_footnotes(footnotes)
    console.print("time: the middle of each card's band; the band, the precision and the rent per GPU-hour are in "
                  "--json and --html")
    console.print(f"[bold]recommendation[/bold]: {plan.recommendation}")
    for line in plan.unmeasured:
        console.print(f"[dim]not measured: {line}[/dim]")


def _list_models(args) -> int:
    from gpufeed.plan.language.model import language_catalog

    if args.html:
        raise ConfigError("--list-models has no page: leave out --html (--json writes the list)")
    models = language_catalog()
    document = {"models": [{"name": entry.name, "hf_id": entry.hf_id, "parameters": entry.parameters,
                            "source": entry.source, "config": entry.config} for entry in models]}
    if args.json != "-":
        table = Table(title="language models in the catalog (gpufeed plan --model NAME)")
        for column in ("name", "parameters", "layers", "width", "vocabulary", "positions", "facts from"):
            table.add_column(column)
        for entry in models:
            config = entry.config
            layers = config.get("num_hidden_layers") or config.get("n_layer") or config.get("num_layers")
            width = config.get("hidden_size") or config.get("n_embd") or config.get("d_model")
            positions = config.get("max_position_embeddings") or config.get("n_positions")
            table.add_row(entry.name, f"{entry.parameters / 1e9:,.2f} B", str(layers), str(width),
                          f"{config['vocab_size']:,}", "relative" if positions is None else f"{positions:,}",
                          entry.source)
        console.print(table)
    emit_document(document, "plan", args)
    return 0


def _language_memory(plan) -> None:
    memory, request = plan.memory, plan.request
    tune = request.tune
    method = tune.method + (f" (rank {tune.lora_rank}, alpha {tune.alpha})" if tune.method != "full" else "")
    method += ", activation checkpointing" if tune.checkpointing else ""
    batch = (f"{request.batch_size} x {plan.sequence_length} tokens" if request.grad_accumulation == 1 else
             f"micro-batch {request.batch_size} x {plan.sequence_length} tokens, {request.grad_accumulation} per step")
    trained = (f"{plan.parameters:,} parameters, all trained" if tune.method == "full" else
               f"{plan.parameters - plan.trainable_parameters:,} parameters frozen and {plan.trainable_parameters:,} "
               f"of LoRA trained")
    console.print(f"[bold]{request.model}[/bold] ({plan.model_type}, from {plan.source}): {trained}; {method}; "
                  f"{batch}; {request.optimizer}, {request.precision}")
    table = Table(title=f"device memory of one training step (traced on fake tensors); peak in the "
                        f"{memory.peak_phase}")
    table.add_column("part")
    table.add_column("size", justify="right")
    table.add_column("in the peak", justify="right")
    parts = memory.peak_parts
    rows = (("weights, trained", memory.trainable_weights_bytes, None),
            ("weights, frozen (and buffers)", memory.frozen_weights_bytes, None),
            ("weights", memory.weights_bytes, parts.get("weights")),
            ("gradients", memory.gradients_bytes, parts.get("gradients")),
            ("optimizer state", memory.optimizer_bytes, parts.get("optimizer")),
            ("activations (forward/backward peak)", memory.activations_bytes, parts.get("activations")),
            ("optimizer step's temporaries", memory.optimizer_step_bytes, parts.get("optimizer step")),
            ("overhead", memory.overhead_bytes, parts.get("overhead")),
            ("peak", memory.peak_bytes, memory.peak_bytes))
    for name, size, in_peak in rows:
        table.add_row(name, size_text(size, 2, 1), "" if in_peak is None else size_text(in_peak, 2, 1))
    console.print(table)
    if plan.flops_per_token is not None:
        rule = "6N + 12·L·h·s" if request.tune.method == "full" else "4N + 2N_trained + 12·L·h·s: no weight " \
                                                                      "gradients for the frozen base"
        console.print(f"training FLOPs per token ({rule}): {plan.flops_per_token:,}")
    if memory.step_flops:
        tokens = memory.batch_size * plan.sequence_length
        console.print(f"the step as traced: {memory.step_flops / tokens:,.0f} FLOPs a token (attention by torch's "
                      f"formulas{', the recomputed forward' if tune.checkpointing else ''}); the times below use it")


def _sharded_memory(plan) -> None:
    sharded = plan.sharded
    if sharded is None:
        return
    nodes = f" on {sharded.nodes} nodes of {sharded.gpus_per_node}" if sharded.nodes > 1 else ""
    offload = f", {sharded.offload} offloaded to host RAM" if sharded.offload != "none" else ""
    table = Table(title=f"per GPU, {sharded.strategy} over {sharded.gpus} GPUs{nodes} (state divided by "
                        f"{sharded.degree}){offload}; peak at {sharded.peak_moment}")
    table.add_column("part")
    table.add_column("size", justify="right")
    table.add_column("in the peak", justify="right")
    rows = (("weights", sharded.weights_bytes, "weights"), ("gradients", sharded.gradients_bytes, "gradients"),
            ("optimizer state", sharded.optimizer_bytes, "optimizer"),
            ("gathered (unsharded units)", sharded.gathered_bytes, "gathered"),
            ("communication buffers", sharded.buffers_bytes, "buffers"),
            ("activations", sharded.activations_bytes, "activations"),
            ("optimizer step's temporaries", sharded.step_temporaries_bytes, "step_temporaries"),
            ("overhead", sharded.overhead_bytes, "overhead"), ("peak", sharded.peak_bytes, None),
            ("offloaded to host RAM", sharded.host_bytes, ""))
    for name, size, key in rows:  # the third column: the part's bytes live at the peak (peak_parts)
        live = sharded.peak_bytes if key is None else sharded.peak_parts.get(key)
        table.add_row(name, size_text(size, 2, 1), size_text(live, 2, 1) if live is not None else "")
    table.add_row("sent per step (of it between nodes)",
                  f"{size_text(sharded.communication_bytes, 2, 1)} ({size_text(sharded.network_bytes, 2, 1)})", "")
    console.print(table)
    console.print(f"layout: {sharded.layout}")
    for line in sharded.notes:
        console.print(f"note: {line}")


def _language_host(host) -> None:
    if host is None:
        return
    nodes = f", {host.nodes} such nodes" if host.nodes > 1 else ""
    console.print(f"[bold]host[/bold] for {host.gpus} x {host.gpu} a node{nodes} ({host.system})")
    minimum = bytes_text(host.ram_minimum_bytes, "GiB", 0)
    console.print(f"  RAM: {bytes_text(host.ram_bytes, 'GiB', 0)} (at least {minimum}): {host.ram_reason}",
                  highlight=False)
    others = "; ".join(f"{way}: {bytes_text(size, 'GiB', 1)}" for way, size in host.loading.items()
                       if way != host.loading_assumed)
    console.print(f"  loading the checkpoint, assumed {host.loading_assumed}; the others: {others}", highlight=False)
    console.print(f"  disk: {bytes_text(host.disk_bytes, 'GiB', 0)}: {host.disk_reason}", highlight=False)
    console.print(f"  CPU cores: {host.cpu_cores}: {host.cpu_reason}", highlight=False)
    console.print(f"  power supply: {host.psu_watts:,} W: {host.psu_arithmetic}", highlight=False)


def _show_language(plan) -> None:
    _language_memory(plan)
    _sharded_memory(plan)
    request = plan.request
    gpus = request.sharding.gpus
    where = f"{gpus} of each GPU" if gpus > 1 else "one GPU"
    table = Table(title=f"{where}, {plan.tokens:,.0f} tokens at batch {request.batch_size} x {plan.sequence_length}; "
                        f"batch: the largest that fits at {plan.sequence_length} tokens, tokens: the longest sequence "
                        f"at batch {request.batch_size}", **COMPACT)
    for column, justify in (("GPU", "left"), ("fits", "left"), ("batch", "right"), ("tokens", "right"),
                            ("tok/s a GPU", "right"), ("hours", "right"), ("rent $", "right"), ("", "left")):
        table.add_column(column, justify=justify)
    footnotes: dict[str, int] = {}
    for gpu in plan.gpus:
        rate = NA if gpu.time is None else rate_text(gpu.time.tokens_per_s_per_gpu)
        hours = NA if gpu.hours is None else duration_text(gpu.hours)
        rent = NA if gpu.cost_rent_usd is None else f"{gpu.cost_rent_usd:,.0f}"
        table.add_row(gpu.name.removeprefix("NVIDIA "), "yes" if gpu.fits else "no", f"{gpu.max_batch_size:,}",
                      f"{gpu.max_sequence_length:,}", rate, hours, rent, _marks(gpu.notes, footnotes))
    console.print(table)
    _print_footnotes(footnotes)
    if plan.recommendation:
        console.print(f"[bold]recommendation[/bold]: {plan.recommendation}")
    _language_host(plan.host)
    for line in plan.notes:
        console.print(f"note: {line}")
    for line in plan.memory.notes:
        console.print(f"note: {line}")
    for line in plan.unmeasured:
        console.print(f"[dim]not measured: {line}[/dim]")


def _run_language(args) -> int:
    from gpufeed.plan.language.run import language_plan_json, make_language_plan

    request = _language_request(args)
    check_output_paths(args)
    if args.check:
        from gpufeed.plan.language.check import refuse_unrunnable

        refuse_unrunnable(request.tune.method, request.optimizer)
    from gpufeed.plan.language.check import check_language_plan

    with _status(args).status("planning: tracing the training step on fake tensors, then what fits on each GPU"):
        plan = make_language_plan(request)
    return _checked_and_shown(args, plan, language_plan_json(plan), check_language_plan, _show_language)


def _status(args):
    return error_console if args.json == "-" else console


def _checked_and_shown(args, plan, document: dict, check, show) -> int:
    """The plan's document with --check's block when asked (`check(plan)`), the plan shown unless --json -, then
    saved: the end of both kinds of plan."""
    if args.check:
        with _status(args).status(f"checking: running {plan.request.model} for 3 steps here, peak memory and time"):
            document["check"] = check(plan)
    if args.json != "-":
        show(plan)
        for line in document.get("check", {}).get("lines", []):
            console.print(f"check: {line}")
    emit_document(document, "plan", args)
    return 0


def run(args) -> int:
    from gpufeed.plan.run import make_plan, plan_json

    if args.list_models:
        return _list_models(args)
    if is_language_model(args):
        return _run_language(args)
    if args.gpus is not None and args.gpus <= 0:
        raise ConfigError(f"--gpus must be positive, got {args.gpus}")
    check_output_paths(args, inputs=(args.data,) if args.data else ())
    from gpufeed.plan.check import check_plan

    with _status(args).status("planning: tracing one training step on fake tensors"):
        plan = make_plan(_request(args))
    return _checked_and_shown(args, plan, plan_json(plan), check_plan, _show)
