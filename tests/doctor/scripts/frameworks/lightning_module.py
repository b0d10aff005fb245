"""A PyTorch Lightning module whose train_dataloader() builds its DataLoader, trained on the CPU with nothing
written (no logger, no checkpoint). --sleep-ms makes each sample slow to load (the input-bound run); --width
narrows the model (there, so that loading stays most of the step however slow a busy machine makes it);
--from-datasets trains from LightningDataModule.from_datasets instead, whose DataLoader Lightning builds itself."""

import argparse
import tempfile

import pytorch_lightning as pl
import torch
from framework_parts import TokenIds, classifier
from torch.utils.data import DataLoader


class Classifier(pl.LightningModule):
    def __init__(self, sleep_ms: float, width: int):
        super().__init__()
        self.model, self.sleep_ms = classifier(width), sleep_ms

    def training_step(self, batch, index):
        return torch.nn.functional.cross_entropy(self.model(batch["input_ids"]), batch["labels"])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return DataLoader(TokenIds(sleep_ms=self.sleep_ms), batch_size=8, shuffle=True,  # doctor: site
                          num_workers=0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sleep-ms", type=float, default=0.0)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--from-datasets", action="store_true")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=options.steps, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                             default_root_dir=root)
        if options.from_datasets:
            data = pl.LightningDataModule.from_datasets(TokenIds(sleep_ms=options.sleep_ms), batch_size=8)
            trainer.fit(Classifier(options.sleep_ms, options.width), datamodule=data)  # doctor: fit
        else:
            trainer.fit(Classifier(options.sleep_ms, options.width))


if __name__ == "__main__":
    main()
