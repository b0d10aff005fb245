"""The doctor's fixes in the words of the framework the script uses (setup.py finds it): the loader's settings
where the user sets them (a DataLoader's arguments, or TrainingArguments' dataloader_* for the Hugging Face
Trainer), in the code of that framework (Lightning's train_dataloader(), the loader before accelerator.prepare),
and its switches for mixed precision and non-blocking copies. The finding modules call these from their one fix
function; nothing here loads torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufeed.doctor.frameworks.setup import NAMES, TRAINING_ARGUMENTS_KNOBS, Setup

if TYPE_CHECKING:
    from gpufeed.doctor.notes import Notes

KNOBS = {"TrainingArguments": TRAINING_ARGUMENTS_KNOBS}  # by where the settings are given; else generic names


def explain(setup: Setup, notes: Notes, site: bool = True) -> None:
    """The notes of a finding in the framework's words: the framework found and how, or one imported but not tied
    to the loop; with `site` (a finding that names the loader's line), a site not known and why."""
    if setup.framework != "torch":
        notes.run(f"framework: {NAMES[setup.framework]} ({setup.how}); the fixes name its settings")
    elif setup.imported:
        names = ", ".join(NAMES[name] for name in setup.imported)
        notes.run(f"framework: {names} imported, but the training loader was neither built nor read by it; the "
                  f"fixes are in plain PyTorch's words")
    if not site:
        return
    if setup.site is None:
        notes.unmeasured("loader site: not known (the training loader was not built while the doctor watched, or "
                         "is not a torch DataLoader)")
    elif setup.note:
        notes.run(f"loader site: {setup.note}")


def knob(setup: Setup, name: str) -> str:
    """A loader setting's name where the user sets it: `num_workers`, or TrainingArguments' dataloader_num_workers."""
    return KNOBS.get(setup.settings_in, {}).get(name, name)


def loader_evidence(setup: Setup, names: tuple[str, ...], notes: Notes) -> dict:
    """The evidence a finding about the loader adds: `site` ("train.py:42"), `framework`, and `settings`, the
    current values of the settings it advises changing, in the framework's names."""
    explain(setup, notes)
    settings = {knob(setup, name): getattr(setup.knobs, name) for name in names} if setup.knobs else None
    return {"site": setup.site, "framework": setup.framework, "settings": settings}


def loader_noun(setup: Setup) -> str:
    return "the Trainer's DataLoader" if setup.settings_in == "TrainingArguments" else "the DataLoader"


def _arguments(setup: Setup, changes: dict[str, str]) -> list[str]:
    return [f"{knob(setup, name)}={value}" for name, value in changes.items()]


def set_loader(setup: Setup, changes: dict[str, str]) -> str:
    """The change in words, at the user's line: "set num_workers=4, persistent_workers=True in the DataLoader(...)
    at train.py:42", "set dataloader_num_workers=4 in TrainingArguments(...) at train.py:30"."""
    trainer = setup.settings_in == "TrainingArguments"
    noun = arguments_class(setup) if trainer else "the DataLoader"
    if setup.site is None:
        where = noun if trainer else noun + {"lightning": " that train_dataloader() returns",
                                             "accelerate": " passed to accelerator.prepare"}.get(setup.framework, "")
    elif setup.site_is and setup.site_is.endswith("(...)"):  # the settings' own line
        where = f"{'' if trainer else 'the '}{setup.site_is} at {setup.site}"
    else:
        where = f"{noun} (the loader is built by {setup.site_is} at {setup.site})"
    if setup.site is not None and setup.framework == "accelerate":
        where += ", before accelerator.prepare"
    return f"set {', '.join(_arguments(setup, changes))} in {where}"


def _wrapped(start: str, arguments: list[str], close: str = ")", width: int = 110) -> str:
    lines, indent = [start], " " * len(start)
    for argument in arguments:
        if len(lines[-1]) + len(argument) + 2 > width:
            lines[-1] = lines[-1].rstrip()
            lines.append(indent)
        lines[-1] += argument + ", "
    return "\n".join(lines).rstrip(", ") + close


def loader_snippet(setup: Setup, changes: dict[str, str]) -> str:
    """The loader with `changes` (generic names, values as code), in the framework's code."""
    if setup.settings_in == "TrainingArguments":
        lines = "".join(f"    {argument},\n" for argument in _arguments(setup, changes))
        return f"args = {arguments_class(setup)}(\n    ...,  # your other arguments, as they are\n{lines})"
    batch = setup.knobs.batch_size if setup.knobs and setup.knobs.batch_size is not None else "batch_size"
    changes = dict(changes)
    batch = changes.pop("batch_size", batch)  # a change of the batch itself replaces the one set
    arguments = [f"batch_size={batch}", "shuffle=True", *_arguments(setup, changes)]
    if setup.framework == "lightning":
        return ("def train_dataloader(self):  # in the LightningModule or LightningDataModule\n"
                + _wrapped("    return torch.utils.data.DataLoader(", ["self.train_set", *arguments]))
    loader = _wrapped("loader = torch.utils.data.DataLoader(", [setup.dataset_variable or "dataset", *arguments])
    if setup.framework == "accelerate":
        loader += "\nmodel, optimizer, loader = accelerator.prepare(model, optimizer, loader)  # settings carry over"
    return loader


def arguments_class(setup: Setup) -> str:
    """The class the user makes the Trainer's arguments with: TrainingArguments, or its subclass where the script
    made one (TRL's SFTConfig, transformers' Seq2SeqTrainingArguments), as setup.py recorded it."""
    made = setup.site_is or ""
    if setup.settings_in == "TrainingArguments" and made.endswith("(...)"):
        return made[:-len("(...)")]
    return "TrainingArguments"


def _arguments_site(setup: Setup) -> str:
    """What follows "TrainingArguments" (or the script's subclass) in words: "(...) at train.py:30" when that is
    the line the Setup knows."""
    return f"(...) at {setup.site}" if setup.site_is == f"{arguments_class(setup)}(...)" and setup.site else ""


def mixed_precision(setup: Setup, device_type: str) -> tuple[str, str]:
    """(the switch in words, the code) for bf16 mixed precision in the framework's terms; on a GPU with the fp16
    alternative for GPUs older than Ampere (on the CPU there is none to name)."""
    gpu = device_type != "cpu"
    if setup.framework == "transformers":
        return (f"set bf16=True in {arguments_class(setup)}{_arguments_site(setup)}"
                + (" (fp16=True on GPUs older than Ampere)" if gpu else ""),
                f"args = {arguments_class(setup)}(\n    ...,  # your other arguments, as they are\n    bf16=True,\n)")
    if setup.framework == "lightning":
        return ("pass precision=\"bf16-mixed\" to the Lightning Trainer"
                + (" (\"16-mixed\" on GPUs older than Ampere)" if gpu else ""),
                "trainer = pl.Trainer(..., precision=\"bf16-mixed\")")
    if setup.framework == "accelerate":
        return ("make the Accelerator with mixed_precision=\"bf16\""
                + (" (\"fp16\" on GPUs older than Ampere)" if gpu else ""),
                "accelerator = Accelerator(mixed_precision=\"bf16\")")
    return ("run the forward under torch.autocast with bfloat16"
            + (" (float16 with torch.amp.GradScaler on GPUs older than Ampere)" if gpu else ""),
            f"with torch.autocast(\"{device_type}\", dtype=torch.bfloat16):\n"
            f"    loss = criterion(model(images), labels)\nloss.backward()")


def larger_batch(setup: Setup, batch: int | str, factor: int, accumulated: int = 1) -> tuple[str, str]:
    """(the change in words, the code) for a batch `factor` times `batch` (an int, or code such as "batch_size")
    where the framework sets it: TrainingArguments' per_device_train_batch_size (and gradient_accumulation_steps,
    learning_rate), the DataLoader that Lightning's train_dataloader() returns (its DataModule's batch_size), the
    DataLoader before accelerator.prepare, or the script's DataLoader. With `accumulated` batches per optimizer
    step (gradient accumulation; `factor` divides it) the same samples per step in accumulated / factor larger
    batches, the learning rate unchanged; else the learning rate scaled with the batch (linear scaling)."""
    larger = batch * factor if isinstance(batch, int) else f"{factor} * {batch}"
    trainer = setup.settings_in == "TrainingArguments"
    if accumulated > 1:
        changes, fewer = {"batch_size": str(larger)}, max(1, accumulated // factor)
        if trainer:
            words = (f"set per_device_train_batch_size={larger}, gradient_accumulation_steps={fewer} in "
                     f"{arguments_class(setup)}{_arguments_site(setup)}")
            code = (f"args = {arguments_class(setup)}(\n    ...,  # your other arguments, as they are\n"
                    f"    per_device_train_batch_size={larger},\n"
                    f"    gradient_accumulation_steps={fewer},  # was {accumulated}: the same samples per optimizer "
                    f"step\n)")
            return words, code
        return (f"{set_loader(setup, changes)}, and accumulate {fewer} per optimizer step instead of {accumulated}",
                loader_snippet(setup, changes) + f"\naccumulation_steps = {fewer}  # was {accumulated}: the same "
                                                 f"samples per optimizer step")
    if trainer:
        words = (f"set per_device_train_batch_size={larger} in {arguments_class(setup)}{_arguments_site(setup)} and "
                 f"scale learning_rate there with it ({factor}x yours)")
        code = (f"args = {arguments_class(setup)}(\n    ...,  # your other arguments, as they are\n"
                f"    per_device_train_batch_size={larger},\n"
                f"    learning_rate={factor} * base_lr,  # base_lr: yours now (linear scaling); warmup_steps= if it "
                f"diverges\n)")
        return words, code
    scaled = f"{factor} * base_lr  # base_lr: yours now (linear scaling); warm up if it diverges"
    changes = {"batch_size": str(larger)}
    if setup.framework == "lightning":
        return (f"{set_loader(setup, changes)} (or the LightningDataModule's batch_size that it reads), and scale "
                f"the learning rate in configure_optimizers() with it",
                loader_snippet(setup, changes) + f"\n# in configure_optimizers(): lr = {scaled}")
    return (f"{set_loader(setup, changes)}, and scale the learning rate with it",
            loader_snippet(setup, changes) + f"\nfor group in optimizer.param_groups:\n    group[\"lr\"] = {scaled}")


def pinned_copies(setup: Setup) -> tuple[str, str]:
    """(pinned memory and copies that overlap compute, in words; the code) in the framework's terms."""
    pin = set_loader(setup, {"pin_memory": "True"})
    if setup.framework == "transformers":
        return (f"{pin}, with accelerator_config={{\"non_blocking\": True}} so the Trainer's copies do not wait",
                f"args = {arguments_class(setup)}(\n    ...,  # your other arguments, as they are\n"
                "    dataloader_pin_memory=True,\n    accelerator_config={\"non_blocking\": True},\n)")
    if setup.framework == "lightning":
        return (f"{pin}; Lightning then copies each batch to the GPU with non_blocking=True",
                loader_snippet(setup, {"pin_memory": "True"}))
    if setup.framework == "accelerate":
        return (f"{pin}, and make the Accelerator with dataloader_config=DataLoaderConfiguration(non_blocking=True) "
                f"so its copies do not wait",
                "accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(non_blocking=True))\n"
                + loader_snippet(setup, {"pin_memory": "True"}))
    return (f"{pin} and copy with non_blocking=True so the copy overlaps compute",
            loader_snippet(setup, {"pin_memory": "True"}) + "\n"
            "for images_uint8, labels in loader:  # the dataset returns uint8 (N, C, H, W)\n"
            "    images = images_uint8.to(\"cuda\", non_blocking=True).float().div_(255)\n"
            "    labels = labels.to(\"cuda\", non_blocking=True)")


def autocast_path(framework: str) -> str:
    """How --try's autocast of the outermost forward compares with the framework's own switch."""
    switch = {"transformers": "TrainingArguments(bf16=True)", "lightning": "Trainer(precision=\"bf16-mixed\")",
              "accelerate": "Accelerator(mixed_precision=\"bf16\")"}.get(framework)
    return (f" (a stand-in for {switch}, which also runs under autocast what the framework computes outside the "
            f"model's forward)" if switch else "")


def experiment_path(framework: str, changes: dict[str, str]) -> str | None:
    """How --try's DataLoader.__init__ change (`changes`, generic names, values as code) reaches the framework's
    training loader, for the experiment's description; None for plain PyTorch (the change is the user's own)."""
    if framework == "transformers":
        same = ", ".join(_arguments(Setup(settings_in="TrainingArguments"), changes))
        return (f"set in DataLoader.__init__, which the Trainer calls with TrainingArguments' values: as "
                f"TrainingArguments({same})")
    if framework == "accelerate":
        return "set in DataLoader.__init__: the loader passed to accelerator.prepare and the one prepare builds"
    if framework == "lightning":
        return "set in DataLoader.__init__: the DataLoader that train_dataloader() builds"
    return None


def shorter_padding(setup: Setup, source: str, site: str | None, seq2seq: bool) -> tuple[str, str]:
    """Batches padded to their longest row instead of a fixed length, in the framework's words (padding_waste's
    fix): `source` is where the padding is made (observe/padding.py's words), `site` the user's line for it."""
    at = f" at {site}" if site else ""
    if "tokenizer" in source:
        stop = f'drop padding="max_length" from the tokenizer call{at}'
    elif "collator" in source and "max_length" in source:
        stop = f'build the collator with padding="longest" (its default) instead of "max_length"{at}'
    elif "pad_to_multiple_of" in source:
        stop = (f"make the collator pad to a small multiple{at} (pad_to_multiple_of=8, or None), not to a width "
                f"beyond the rows' longest")
    elif "collate" in source:
        stop = f"make the collate function{at} pad to the batch's longest row, not a fixed length"
    else:
        stop = "pad each batch to its longest row, not to a fixed length"
    stop = stop[0].upper() + stop[1:]  # not str.capitalize, which lowercases the user's path and None
    if (setup.trainer or "").startswith("trl."):
        config = f"{arguments_class(setup)}{_arguments_site(setup)}"
        words = (f"{stop}: {setup.trainer.partition('.')[2]} pads each batch to its longest row itself when the "
                 f"dataset's rows come unpadded (text, or input_ids without padding) and pad_to_multiple_of in "
                 f"{config} is small or None. With no padding at all, set padding_free=True there (the rows of a "
                 f"batch concatenated; it needs an attention that keeps them apart: attn_implementation="
                 f"\"flash_attention_2\"), or packing=True (rows packed into blocks of max_length).")
        snippet = (f"args = {arguments_class(setup)}(\n    ...,  # your other arguments, as they are\n"
                   "    pad_to_multiple_of=None,  # each batch padded to its longest row\n"
                   "    padding_free=True,  # or packing=True; either wants attn_implementation=\"flash_attention_2\"\n"
                   ")\ntrainer = SFTTrainer(model=model, args=args, train_dataset=dataset)  # rows not padded")
        return words, snippet
    if setup.framework == "transformers":
        collator = "DataCollatorForSeq2Seq(tokenizer, model=model)" if seq2seq else \
            "DataCollatorWithPadding(tokenizer)"
        words = (f"{stop}, and let the Trainer pad each batch to its longest row: "
                 f"data_collator={collator} (causal language models: DataCollatorForLanguageModeling(tokenizer, "
                 f"mlm=False), which also makes the labels); add group_by_length=True to TrainingArguments so "
                 f"that rows of similar length share a batch. With no padding at all, DataCollatorWithFlattening "
                 f"(or TRL's SFTConfig(padding_free=True), or packing=True) concatenates the rows; it needs an "
                 f"attention that keeps them apart: attn_implementation=\"flash_attention_2\".")
        snippet = ("tokenized = dataset.map(lambda rows: tokenizer(rows[\"text\"], truncation=True, max_length=512),\n"
                   "                        batched=True)  # no padding here: the collator pads each batch\n"
                   f"args = {arguments_class(setup)}(..., group_by_length=True)\n"
                   f"trainer = Trainer(model=model, args=args, train_dataset=tokenized, data_collator={collator})")
        return words, snippet
    where = {"lightning": "in the DataLoader that train_dataloader() returns",
             "accelerate": "in the DataLoader you pass to accelerator.prepare"}.get(setup.framework, "")
    words = (f"{stop}: tokenize without padding and pad in the DataLoader's collate_fn"
             f"{' ' + where if where else ''}, to the batch's longest row (tokenizer.pad or "
             f"torch.nn.utils.rnn.pad_sequence); a sampler that puts rows of similar length in the same batch "
             f"(sort by length within buckets of a few batches) leaves little padding at all.")
    snippet = ("def collate(rows):  # each batch padded to its own longest row\n"
               "    return tokenizer.pad([{\"input_ids\": row[\"input_ids\"]} for row in rows], padding=\"longest\",\n"
               "                         return_tensors=\"pt\")\n"
               "loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True, collate_fn=collate)")
    return words, snippet
