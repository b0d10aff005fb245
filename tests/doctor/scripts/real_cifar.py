"""A CIFAR-style training script as people write it: argparse flags, a Dataset of uint8 images with per-sample
numpy augmentation (random crop with padding, horizontal flip) and a hand-written transform chain, a DataLoader
with 2 persistent workers, a small CNN, SGD with momentum and a one-cycle LR schedule stepped per iteration, a
validation pass every --val-every steps under torch.no_grad(), and the loss printed every --log-every steps.
The data is synthetic (nothing downloads)."""

import argparse

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

MEAN = np.array([0.4914, 0.4822, 0.4465], dtype=np.float32)
STD = np.array([0.2470, 0.2435, 0.2616], dtype=np.float32)


class RandomCrop:
    def __init__(self, size: int, padding: int):
        self.size, self.padding = size, padding

    def __call__(self, image: np.ndarray) -> np.ndarray:  # (H, W, C) uint8
        padded = np.pad(image, ((self.padding, self.padding), (self.padding, self.padding), (0, 0)), mode="reflect")
        top, left = np.random.randint(0, 2 * self.padding + 1, size=2)
        return padded[top:top + self.size, left:left + self.size]


class RandomFlip:
    def __call__(self, image: np.ndarray) -> np.ndarray:
        return image[:, ::-1] if np.random.rand() < 0.5 else image


class ToNormalizedTensor:
    def __call__(self, image: np.ndarray) -> torch.Tensor:
        array = (image.astype(np.float32) / 255.0 - MEAN) / STD
        return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))  # (C, H, W)


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, image):
        for transform in self.transforms:
            image = transform(image)
        return image


class SyntheticCIFAR(Dataset):
    def __init__(self, count: int, transform, seed: int):
        generator = np.random.default_rng(seed)
        self.images = generator.integers(0, 256, size=(count, 32, 32, 3), dtype=np.uint8)
        self.labels = generator.integers(0, 10, size=count)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        return self.transform(self.images[index]), int(self.labels[index])


def make_model() -> nn.Module:
    def block(inputs: int, outputs: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(inputs, outputs, 3, padding=1, bias=False), nn.BatchNorm2d(outputs),
                             nn.ReLU(inplace=True), nn.MaxPool2d(2))
    return nn.Sequential(block(3, 16), block(16, 32), block(32, 64), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(64, 10))


def evaluate(model: nn.Module, loader: DataLoader) -> float:
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for images, labels in loader:
            correct += (model(images).argmax(1) == labels).sum().item()
            total += len(labels)
    model.train()
    return correct / total


def main() -> None:
    parser = argparse.ArgumentParser(description="train a small CNN on CIFAR-like data")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--val-every", type=int, default=50)
    parser.add_argument("--log-every", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(0)
    train_set = SyntheticCIFAR(2048, Compose([RandomCrop(32, 4), RandomFlip(), ToNormalizedTensor()]), seed=0)
    val_set = SyntheticCIFAR(256, ToNormalizedTensor(), seed=1)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                              persistent_workers=args.workers > 0, pin_memory=False, drop_last=True)
    val_loader = DataLoader(val_set, batch_size=128, shuffle=False, num_workers=0)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4, nesterov=True)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, epochs=args.epochs,
                                                    steps_per_epoch=len(train_loader))
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    step = 0
    for epoch in range(args.epochs):
        for images, labels in train_loader:
            loss = criterion(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            if step % args.log_every == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.4f}")
            if step % args.val_every == 0:
                print(f"step {step} validation accuracy {evaluate(model, val_loader):.3f}")
    print("done")


if __name__ == "__main__":
    main()
