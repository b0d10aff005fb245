"""What to do about each finding: the remedy in words and as code.

The rules (`rules.py`) decide whether a finding holds and with which numbers; this module only words the fix.
Each function returns `(fix, snippet)`. Arguments are numbers the rules measured or derived from the inputs;
`device_type` is "cuda" or "cpu" and picks the variant of the code that runs there.
"""

from __future__ import annotations


def input_bound(workers: int | None, on_gpu: bool, current: int | None = None,
                restart_share: float | None = None) -> tuple[str, str]:
    """`workers`: the suggested count; `current`: the loader's own. When it already has that many, more
    processes cannot help (each would get less of a core): the fix is a cheaper sample. `restart_share`: the
    share of the wait spent starting or stopping the workers, when that is most of it."""
    device = "cuda" if on_gpu else "cpu"
    if restart_share is not None:
        fix = (f"The step waits for its next batch, and {restart_share:.0%} of that wait is the DataLoader starting "
               f"or stopping its {current} worker processes at an epoch's start or end, not loading. Keep them alive "
               f"between epochs: persistent_workers=True (with multiprocessing_context=\"spawn\" each start imports "
               f"torch and your script again in every worker).")
        snippet = (f"loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True,\n"
                   f"                                     num_workers={current}, persistent_workers=True)")
        return fix, snippet
    feed = (f"# pack once (gpufeed pack photos/ data/train.gpuf), then\n"
            f"import gpufeed\n"
            f"feed = gpufeed.Feed(\"data/train.gpuf\", batch_size=batch_size, device=\"{device}\")\n"
            f"for images, labels in feed:\n"
            f"    ...")
    if current is not None and workers is not None and current >= workers:
        fix = (f"The step waits for its next batch, and the DataLoader already has {current} worker processes, as "
               f"many as suggested here ({workers}, from the cores): more would only share the same cores. Make "
               f"each sample cheaper: decode once with `gpufeed pack` and read the packed file with gpufeed.Feed "
               f"(uint8 batches gathered on threads, augmentation done per batch"
               + (" on the device" if on_gpu else "") + ", not per sample in Python), and keep the workers alive "
               "across epochs (persistent_workers=True" + (", with pin_memory=True)." if on_gpu else ")."))
        return fix, feed
    count = str(workers) if workers is not None else "min(os.cpu_count(), 8)"
    pin = ", pin_memory=True" if on_gpu else ""
    fix = (f"The step waits for its next batch. Give the DataLoader more worker processes (num_workers={count})"
           + (", pinned memory (pin_memory=True)" if on_gpu else "")
           + " and persistent_workers=True so they survive the epoch; or decode once with `gpufeed pack` and "
             "read the packed file with gpufeed.Feed, which gathers uint8 batches on threads and augments on the "
             "device.")
    snippet = (f"loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True,\n"
               f"                                     num_workers={count}{pin}, persistent_workers=True,\n"
               f"                                     prefetch_factor=4)\n"
               f"\n"
               f"# or: {feed[2:]}")
    return fix, snippet


def cpu_saturated(cores: int | None, workers: int | None, threads: int | None, on_gpu: bool) -> tuple[str, str]:
    if on_gpu:
        fix = ("The host's cores are all busy while the device waits: the CPU cannot prepare batches fast enough. "
               "Move augmentation to the device, decode once (`gpufeed pack`) instead of every epoch, and keep "
               "loader workers plus training threads at or below the number of cores.")
    else:
        fix = ("More threads want to run than there are cores, so they take turns and each runs slower. Set the "
               "training threads (torch.set_num_threads) plus the loader workers to the number of cores.")
    cores_text = str(cores) if cores is not None else "os.cpu_count()"
    worker_count = workers if workers else 0
    was = ""
    if cores is not None and worker_count >= cores:  # gpufeed's choice: half the cores each, when workers fill them
        worker_count, was = max(1, cores // 2), f" (was {worker_count})"
    suggested_threads = max(1, cores - worker_count) if cores is not None else None
    threads_text = str(suggested_threads) if suggested_threads is not None else f"{cores_text} - workers"
    snippet = (f"cores = {cores_text}\n"
               f"workers = {worker_count}{was}  # loader processes; each should use one thread\n"
               f"torch.set_num_threads({threads_text})  # training threads + workers = cores\n"
               f"loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, num_workers=workers,\n"
               f"                                     worker_init_fn=lambda _: torch.set_num_threads(1))")
    return fix, snippet


def host_to_device() -> tuple[str, str]:
    fix = ("Copies to the device take a large share of the step, or come from pageable memory that the driver "
           "must stage first. Copy from pinned memory (pin_memory=True) with non_blocking=True so the copy "
           "overlaps compute; send uint8 and convert on the device (4x fewer bytes than float32); keep a dataset "
           "that fits on the device there (gpufeed.Feed does this with resident=\"auto\").")
    snippet = ("loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, num_workers=workers,\n"
               "                                     pin_memory=True)\n"
               "for images_uint8, labels in loader:  # the dataset returns uint8 (N, C, H, W)\n"
               "    images = images_uint8.to(\"cuda\", non_blocking=True).float().div_(255)\n"
               "    labels = labels.to(\"cuda\", non_blocking=True)")
    return fix, snippet


def launch_overhead(device_type: str, batch_size: int | None = None) -> tuple[str, str]:
    batch = f"batch_size={batch_size * 4}" if batch_size else "a batch 4x larger"
    if device_type == "cuda":
        fix = ("The device sits idle between kernels: the host (Python, operator dispatch, kernel launches) is "
               "slower than the device. Give each launch more work with a larger batch, fuse small operations, "
               "and let CUDA graphs replay the step with one launch: torch.compile(mode=\"reduce-overhead\").")
        snippet = ("model = torch.compile(model, mode=\"reduce-overhead\")  # CUDA graphs: the step replays as one "
                   "launch\n# and a larger batch: more work per kernel for the same number of launches")
        return fix, snippet
    fix = ("The step is many small operators and the Python between them: the host spends its time dispatching "
           "operators, not computing. Make the operators fewer and larger: a larger batch (the same operators, more "
           "work each), wider layers instead of many narrow ones, and torch.compile, which fuses operators and "
           "removes the Python between them.")
    snippet = (f"loader = torch.utils.data.DataLoader(dataset, {batch}, ...)  # same operators, more work each\n"
               f"model = torch.compile(model)  # fused operators, no Python between them")
    return fix, snippet


def sync_stall(device_type: str) -> tuple[str, str]:
    fix = ("The host waits for the device inside the step (.item(), .cpu(), print of a tensor, synchronize), so "
           "the device runs dry while the host catches up. Accumulate the loss on the device and read it every N "
           "steps.")
    if device_type == "cuda":
        fix += (" To log every step, copy the value with non_blocking=True into pinned memory and print the "
                "previous step's copy, which has landed by then (what `gpufeed doctor --try` measures).")
    snippet = (f"running_loss = torch.zeros((), device=\"{device_type}\")\n"
               f"for step, (images, labels) in enumerate(loader):\n"
               f"    loss = criterion(model(images), labels)\n"
               f"    optimizer.zero_grad(set_to_none=True)\n"
               f"    loss.backward()\n"
               f"    optimizer.step()\n"
               f"    running_loss += loss.detach()  # stays on the device: no wait\n"
               f"    if (step + 1) % 100 == 0:\n"
               f"        print(f\"loss {{running_loss.item() / 100:.4f}}\")  # one wait per 100 steps\n"
               f"        running_loss.zero_()")
    if device_type != "cuda":
        return fix, snippet
    snippet += ("\n\n# or, a value every step, one step late:\n"
                "host_loss = torch.zeros((), pin_memory=True)\n"
                "landed = torch.cuda.Event()\n"
                "for step, (images, labels) in enumerate(loader):\n"
                "    ...  # the step as above\n"
                "    if step > 0:\n"
                "        landed.synchronize()  # the previous step's copy: the device goes on with this step\n"
                "        print(f\"step {step - 1}: loss {host_loss.item():.4f}\")\n"
                "    host_loss.copy_(loss.detach(), non_blocking=True)  # starts the copy, does not wait\n"
                "    landed.record()")
    return fix, snippet


def small_batch(batch_size: int | None, sm_activity_percent: float | None = None,
                accumulated: int = 1) -> tuple[str, str]:
    """The fix for an underfilled device: a batch known to be small, or kernels that occupy few SMs (GPM).
    `accumulated`: batches per optimizer step (gradient accumulation): then the lever is a larger batch with fewer
    accumulated, the same samples per step."""
    if batch_size is None or sm_activity_percent is not None:
        seen = f"the kernels kept only {sm_activity_percent:.0f}% of the SMs busy" if sm_activity_percent is not None \
            else "the device is underfilled"
        batch = f"a batch of {batch_size}" if batch_size else "the batch"
        fix = (f"While the GPU ran kernels, {seen}: each kernel is too small to fill the device. Raise {batch} "
               f"(and the learning rate with it), fuse small operations with torch.compile, or use a smaller GPU.")
        snippet = ("model = torch.compile(model)  # fuses small kernels into fewer, larger ones\n"
                   "loader = torch.utils.data.DataLoader(dataset, batch_size=2 * batch_size, ...)")
        if accumulated > 1:
            fix += f" With {accumulated} batches accumulated per step, raise the batch and accumulate fewer."
        return fix, snippet
    if accumulated > 1:
        step = batch_size * accumulated
        fix = (f"A batch of {batch_size} leaves the device underfilled, and {accumulated} of them are accumulated "
               f"into each optimizer step ({step} samples). Load larger batches and accumulate fewer: the same "
               f"{step} samples per step, the same learning rate, fewer and larger operators.")
        snippet = (f"loader = torch.utils.data.DataLoader(dataset, batch_size={step}, ...)\n"
                   f"accumulation_steps = 1  # was {accumulated}: still {step} samples per optimizer step\n"
                   f"# if {step} samples do not fit in memory: batch_size={step // 2 if step >= 2 else 1}, "
                   f"accumulation_steps = {2 if step >= 2 else 1}")
        return fix, snippet
    larger = batch_size * 4
    fix = (f"A batch of {batch_size} leaves the device underfilled. Raise the batch (try {batch_size * 2} and "
           f"{larger}) and scale the learning rate with it; if memory is the limit, bf16 autocast halves the "
           f"activations.")
    snippet = (f"loader = torch.utils.data.DataLoader(dataset, batch_size={larger}, ...)\n"
               f"for group in optimizer.param_groups:\n"
               f"    group[\"lr\"] = base_lr * {larger} / {batch_size}  # linear scaling; warm up if it diverges")
    return fix, snippet


def precision(float64: bool, device_type: str) -> tuple[str, str]:
    if float64:
        fix = ("Some operations run in float64, where float32 would do: float64 runs at half the CPU's vector "
               "width and at 1/2 to 1/64 of a GPU's float32 rate. NumPy arrays are float64 by default; convert "
               "inputs with .float() and keep the model in float32.")
        snippet = ("images = torch.from_numpy(array).float()  # NumPy gives float64\n"
                   "model = model.float()\n"
                   "torch.set_default_dtype(torch.float32)")
        return fix, snippet
    fix = ("The model trains in float32 without autocast. bf16 autocast runs matrix products on tensor cores "
           "at several times the float32 rate and halves activation memory (Ampere or newer; on older GPUs use "
           "float16 with torch.amp.GradScaler).")
    snippet = (f"with torch.autocast(\"{device_type}\", dtype=torch.bfloat16):\n"
               f"    loss = criterion(model(images), labels)\n"
               f"loss.backward()")
    return fix, snippet


def memory_pressure(device: bool = True, host: bool = False) -> tuple[str, str]:
    """`device`: the device's memory is nearly full or its allocator retried; `host`: the host's RAM is."""
    fix, snippet = "", ""
    if device:
        fix = ("Device memory is nearly full, or the caching allocator had to free its cache and retry, which "
               "synchronizes the device. Lower the activations: bf16 autocast, activation checkpointing, a smaller "
               "batch; let the allocator grow segments instead of fragmenting.")
        snippet = ("# before Python starts:\n"
                   "#   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py\n"
                   "from torch.utils.checkpoint import checkpoint\n"
                   "hidden = checkpoint(block, hidden, use_reentrant=False)  # recompute in backward, do not store")
    if host:
        fix += (" " if fix else "") + (
            "Host RAM is nearly full: the system will swap or the OOM killer will end the run. Each DataLoader worker "
            "can end up with its own copy of an in-memory dataset (Python's reference counts defeat fork's "
            "copy-on-write); keep the data in one memory-mapped file (gpufeed pack, read with gpufeed.Feed), or use "
            "fewer workers.")
        snippet += ("\n" if snippet else "") + ("# pack once, then read the mapped file (no copy per worker)\n"
                                                "feed = gpufeed.Feed(\"data/train.gpuf\", batch_size=batch_size)")
    return fix, snippet


def periodic_stall(period: int) -> tuple[str, str]:
    fix = (f"Every {period} steps one step is much slower: logging, evaluation or a checkpoint on the training "
           f"thread. Do it less often, or in the background (copy the state, write it on a thread).")
    snippet = (f"import threading\n"
               f"if (step + 1) % {period} == 0:\n"
               f"    state = {{name: value.detach().to(\"cpu\", copy=True) "
               f"for name, value in model.state_dict().items()}}\n"
               f"    threading.Thread(target=torch.save, args=(state, \"checkpoint.pt\")).start()")
    return fix, snippet


def communication() -> tuple[str, str]:
    fix = ("The gradient all-reduce is not hidden behind the backward pass. Let DDP overlap it (buckets, "
           "gradient_as_bucket_view=True), skip it on accumulation micro-batches with no_sync(), and communicate "
           "in bf16 if the link is slow.")
    snippet = ("model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank],\n"
               "                                                  gradient_as_bucket_view=True, bucket_cap_mb=25)\n"
               "with model.no_sync():  # all micro-batches but the last\n"
               "    loss.backward()")
    return fix, snippet


def straggler(rank: int) -> tuple[str, str]:
    fix = (f"Rank {rank} is slower than the others and every rank waits for it at each all-reduce. Check that "
           f"rank's GPU clocks and temperature (throttling), its share of the data, its NUMA placement and other "
           f"processes on its host.")
    snippet = (f"# on the host of rank {rank}:\n"
               f"nvidia-smi -q -d PERFORMANCE,CLOCK,TEMPERATURE\n"
               f"nvidia-smi topo -m")
    return fix, snippet


def compute_bound(device_type: str) -> tuple[str, str]:
    fix = ("The device is busy: the next gain is in the model or the kernels: bf16 autocast, channels_last, "
           "torch.compile, a larger GPU.")
    snippet = (f"model = model.to(memory_format=torch.channels_last)\n"
               f"model = torch.compile(model)\n"
               f"with torch.autocast(\"{device_type}\", dtype=torch.bfloat16):\n"
               f"    loss = criterion(model(images.to(memory_format=torch.channels_last)), labels)")
    return fix, snippet
