"""A small language model trained on in-memory texts, padded as many fine-tuning scripts pad them; random weights
from a config (nothing downloaded), a word-level tokenizer built here.

    --model gpt2 | llama | t5     the architecture (tiny configurations)
    --pad max_length | longest | packed
                                  the tokenizer's padding="max_length" to --width; padding="longest" per batch in
                                  the collate; or packed blocks of --width tokens (no padding)
    --loop plain | trainer | own | sft
                                  a DataLoader loop, transformers' Trainer, a loop that tokenizes each batch
                                  itself (no DataLoader), or TRL's SFTTrainer on the texts (--pad max_length: its
                                  pad_to_multiple_of=--width; needs trl and datasets, not gpufeed's dependencies)
Texts hold 8 to 40 words (real tokens: those plus the end token), so at --width 256 most positions are padding.
"""

import argparse
import random
import sys
import tempfile

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="gpt2", choices=("gpt2", "llama", "t5"))
parser.add_argument("--pad", default="max_length", choices=("max_length", "longest", "packed"))
parser.add_argument("--loop", default="plain", choices=("plain", "trainer", "own", "sft"))
parser.add_argument("--width", type=int, default=256)
parser.add_argument("--batch", type=int, default=8)
parser.add_argument("--steps", type=int, default=400)
options = parser.parse_args()

torch.manual_seed(0)
random.seed(0)
WORDS = [f"w{i}" for i in range(200)]
vocabulary = {"[PAD]": 0, "[UNK]": 1, "[EOS]": 2, **{word: i + 3 for i, word in enumerate(WORDS)}}
core = Tokenizer(models.WordLevel(vocabulary, unk_token="[UNK]"))
core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]", eos_token="[EOS]")
texts = [" ".join(random.choices(WORDS, k=random.randint(8, 40))) + " [EOS]" for _ in range(512)]


def model_for(name: str):
    import transformers as hf

    size = len(vocabulary)
    if name == "gpt2":
        config = hf.GPT2Config(vocab_size=size, n_positions=max(512, options.width), n_embd=64, n_layer=2, n_head=2,
                               pad_token_id=0, eos_token_id=2, bos_token_id=2)
        return hf.GPT2LMHeadModel(config)
    if name == "llama":
        config = hf.LlamaConfig(vocab_size=size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                num_attention_heads=2, num_key_value_heads=2, pad_token_id=0, eos_token_id=2,
                                bos_token_id=2, max_position_embeddings=max(512, options.width))
        return hf.LlamaForCausalLM(config)
    config = hf.T5Config(vocab_size=size, d_model=64, d_kv=32, d_ff=128, num_layers=2, num_heads=2, pad_token_id=0,
                         eos_token_id=2, decoder_start_token_id=0)
    return hf.T5ForConditionalGeneration(config)


model = model_for(options.model)
seq2seq = options.model == "t5"


def labelled(encoded: dict) -> dict:
    """Causal LM: labels are the ids with padding left out of the loss; T5: the text reversed as the target,
    padded as the inputs are, to half their width."""
    if seq2seq:
        reversed_texts = [" ".join(reversed(text.split()[:-1])) + " [EOS]" for text in encoded.pop("_texts")]
        padding = "max_length" if options.pad == "max_length" else "longest"
        targets = tokenizer(reversed_texts, padding=padding, max_length=options.width // 2, truncation=True,
                            return_tensors="pt")["input_ids"]
        encoded["labels"] = targets.masked_fill(targets == 0, -100)
    else:
        encoded.pop("_texts", None)
        encoded["labels"] = encoded["input_ids"].masked_fill(encoded["attention_mask"] == 0, -100)
    return encoded


def tokenized(batch_texts: list[str]) -> dict:
    if options.pad == "max_length":
        encoded = dict(tokenizer(batch_texts, padding="max_length", max_length=options.width, truncation=True,
                                 return_tensors="pt"))
    else:
        encoded = dict(tokenizer(batch_texts, padding="longest", truncation=True, return_tensors="pt"))
    encoded["_texts"] = batch_texts
    return labelled(encoded)


def packed_blocks() -> list[dict]:
    ids = [token for text in texts for token in tokenizer(text)["input_ids"]]
    blocks = [ids[i:i + options.width] for i in range(0, len(ids) - options.width, options.width)]
    return [{"input_ids": torch.tensor(block), "attention_mask": torch.ones(options.width, dtype=torch.long),
             "labels": torch.tensor(block)} for block in blocks]


class Rows(torch.utils.data.Dataset):
    """Max-length padding happens here, in the dataset's preparation (as `dataset.map(tokenize)` does)."""

    def __init__(self):
        if options.pad == "packed":
            self.rows = packed_blocks()
        elif options.pad == "max_length":
            encoded = tokenized(texts)
            self.rows = [{key: value[i] for key, value in encoded.items()} for i in range(len(texts))]
        else:
            self.rows = [{"text": text} for text in texts]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index]


def collate(rows: list[dict]) -> dict:
    if "text" in rows[0]:
        return tokenized([row["text"] for row in rows])
    return {key: torch.stack([row[key] for row in rows]) for key in rows[0]}


optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if options.loop == "trainer":
    from transformers import Trainer, TrainingArguments

    with tempfile.TemporaryDirectory() as folder:
        arguments = TrainingArguments(output_dir=folder, per_device_train_batch_size=options.batch,
                                      max_steps=options.steps, report_to=[], use_cpu=True, logging_steps=10_000,
                                      save_strategy="no", dataloader_num_workers=0, disable_tqdm=True,
                                      remove_unused_columns=False)
        Trainer(model=model, args=arguments, train_dataset=Rows(), data_collator=collate).train()
elif options.loop == "sft":
    import datasets
    from trl import SFTConfig, SFTTrainer

    # SFTTrainer tokenizes the text itself and its collator pads each batch; --pad max_length pads every batch to
    # --width by its pad_to_multiple_of (SFTTrainer ignores a pre-tokenized dataset's attention_mask, so padding
    # made in the dataset would be trained on as tokens)
    multiple = options.width if options.pad == "max_length" else None
    rows = datasets.Dataset.from_dict({"text": texts})
    with tempfile.TemporaryDirectory() as folder:
        arguments = SFTConfig(output_dir=folder, per_device_train_batch_size=options.batch, max_steps=options.steps,
                              report_to=[], use_cpu=True, logging_steps=10_000, save_strategy="no",
                              dataloader_num_workers=0, disable_tqdm=True, max_length=options.width,
                              pad_to_multiple_of=multiple)
        SFTTrainer(model=model, args=arguments, train_dataset=rows, processing_class=tokenizer).train()
elif options.loop == "own":
    for step in range(options.steps):
        start = step * options.batch % (len(texts) - options.batch)
        batch = tokenized(texts[start:start + options.batch])
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
else:
    loader = torch.utils.data.DataLoader(Rows(), batch_size=options.batch, shuffle=True, collate_fn=collate)
    done = 0
    while done < options.steps:
        for batch in loader:
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            done += 1
            if done >= options.steps:
                break
sys.exit(0)
