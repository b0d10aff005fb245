"""A Hugging Face Trainer fine-tuning a one-layer BERT built from its config (no weights, no tokenizer, nothing
downloaded) on token ids made per sample. --sleep-ms makes each sample slow to load (the input-bound run);
--width narrows the model (there, so that loading stays most of the step however slow a busy machine makes it)."""

import argparse
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from framework_parts import TokenIds, bert_config  # noqa: E402
from transformers import BertForSequenceClassification, Trainer, TrainingArguments  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sleep-ms", type=float, default=0.0)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--width", type=int, default=192)
    options = parser.parse_args()
    model = BertForSequenceClassification(bert_config(options.width))
    with tempfile.TemporaryDirectory() as output_dir:
        args = TrainingArguments(  # doctor: site
            output_dir=output_dir, max_steps=options.steps, per_device_train_batch_size=8,
            dataloader_num_workers=0, dataloader_pin_memory=False, report_to=[], save_strategy="no",
            logging_strategy="no", use_cpu=True, disable_tqdm=True)
        trainer = Trainer(model=model, args=args, train_dataset=TokenIds(sleep_ms=options.sleep_ms))
        trainer.train()


if __name__ == "__main__":
    main()
