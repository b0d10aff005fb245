"""A fast model starved by augmentation on the CPU: the Dataset crops, resizes, flips, jitters, adds noise to and
normalises each image with torch operations on the CPU, one sample at a time, in the main process
(num_workers=0). A batch of 64 takes the host tens of milliseconds; the small CNN takes the GPU about one.
"""

import random
import sys

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


class AugmentedImages(Dataset):
    """uint8 images (3, 128, 128) in memory, each augmented on every read to float32 (3, 96, 96)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor):
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        image = self.images[index].float() / 255.0
        size = random.randint(80, 128)  # random resized crop
        top, left = random.randint(0, 128 - size), random.randint(0, 128 - size)
        crop = image[:, top:top + size, left:left + size]
        crop = F.interpolate(crop[None], size=(96, 96), mode="bilinear", align_corners=False)[0]
        if random.random() < 0.5:
            crop = crop.flip(-1)
        crop = crop * random.uniform(0.8, 1.2) + random.uniform(-0.1, 0.1)  # contrast, brightness
        gray = crop.mean(dim=0, keepdim=True)
        crop = gray + (crop - gray) * random.uniform(0.8, 1.2)  # saturation
        crop = crop + 0.02 * torch.randn_like(crop)
        return (crop.clamp(0.0, 1.0) - MEAN) / STD, self.labels[index]


def main(epochs: int = 100, batch_size: int = 64) -> None:
    if not torch.cuda.is_available():
        sys.exit("gpu_cpu_augment.py needs a CUDA GPU: torch.cuda.is_available() is False")
    device = "cuda"
    torch.manual_seed(0)
    random.seed(0)
    images = torch.randint(0, 256, (1024, 3, 128, 128), dtype=torch.uint8)
    labels = torch.randint(0, 10, (1024,))
    loader = DataLoader(AugmentedImages(images, labels), batch_size=batch_size, shuffle=True, num_workers=0)
    model = nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, stride=2,
                          padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for _ in range(epochs):
        for batch, target in loader:
            batch, target = batch.to(device), target.to(device)
            loss = F.cross_entropy(model(batch), target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
