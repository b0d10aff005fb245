"""Published single-GPU training throughput the planner's times are fitted to and checked against.

NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets (github.com/NVIDIA/DeepLearningExamples, read at
commit 729963dd, 2024-04-04; the READMEs last changed 2022-10-03), "Training performance results", rows "1" GPU:
"Our results were obtained by running the applicable training script in the pytorch-21.03 NGC container".
Batch sizes and layouts are those of configs.yml for the platform (DGXA100, DGX1V): mixed precision (AMP: fp16
autocast with a loss scaler) in NHWC, TF32 and FP32 in NCHW; SGD with momentum; 224 x 224 crops, 1000 classes.

The ResNet-50 rows fit the efficiencies (roofline.DEFAULT_EFFICIENCY); the ResNeXt-101 32x4d rows of the same
tables are held out: they are not used to fit, only to check, so the check is not circular.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from gpufeed.train.models import Bottleneck

README = "PyTorch/Classification/ConvNets/{model}/README.md"
CONTAINER = "pytorch-21.03 NGC container"


@dataclass(frozen=True)
class PublishedThroughput:
    """One published figure: images/s of one GPU training `model` at `batch_size`, in `precision` (our name for
    it: AMP is fp16, TF32 is tf32), in channels_last (NHWC) or not, and where it is printed."""

    model: str  # resnet50 | resnext101-32x4d
    gpu: str  # the catalog row
    precision: str
    batch_size: int
    channels_last: bool
    images_per_s: float
    source: str
    fitted: bool  # used to fit DEFAULT_EFFICIENCY (else held out)


def _source(model: str, table: str, column: str) -> str:
    return f"{README.format(model=model)}, table \"Training performance: {table}\", row 1 GPU, {column}; {CONTAINER}"


A100 = "NVIDIA DGX A100 (8x A100 80GB)"
V100 = "NVIDIA DGX-1 16GB (8x V100 16GB)"
PUBLISHED = (
    PublishedThroughput("resnet50", "NVIDIA A100 SXM4 80GB", "tf32", 256, False, 938,
                        _source("resnet50v1.5", A100, "Throughput - TF32"), True),
    PublishedThroughput("resnet50", "NVIDIA A100 SXM4 80GB", "fp16", 256, True, 2470,
                        _source("resnet50v1.5", A100, "Throughput - mixed precision"), True),
    PublishedThroughput("resnet50", "NVIDIA V100 SXM2 16GB", "fp32", 112, False, 367,
                        _source("resnet50v1.5", V100, "Throughput - FP32"), True),
    PublishedThroughput("resnet50", "NVIDIA V100 SXM2 16GB", "fp16", 256, True, 1200,
                        _source("resnet50v1.5", V100, "Throughput - mixed precision"), True),
    PublishedThroughput("resnext101-32x4d", "NVIDIA A100 SXM4 80GB", "tf32", 128, False, 456,
                        _source("resnext101-32x4d", A100, "Throughput - TF32"), False),
    PublishedThroughput("resnext101-32x4d", "NVIDIA A100 SXM4 80GB", "fp16", 128, True, 1211,
                        _source("resnext101-32x4d", A100, "Throughput - mixed precision"), False),
    PublishedThroughput("resnext101-32x4d", "NVIDIA V100 SXM2 16GB", "fp32", 64, False, 147,
                        _source("resnext101-32x4d", V100, "Throughput - FP32"), False),
    PublishedThroughput("resnext101-32x4d", "NVIDIA V100 SXM2 16GB", "fp16", 128, True, 587,
                        _source("resnext101-32x4d", V100, "Throughput - mixed precision"), False),
)


def resnext101_32x4d(num_classes: int = 1000) -> nn.Module:
    """ResNeXt-101 32x4d for 224 x 224 images: ImageNet stem, stages of 3, 4, 23 and 3 blocks (44,177,704
    parameters at 1000 classes; timm's resnext101_32x4d has 44.18 M), average pool, fc."""
    layers: list[nn.Module] = [nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64),
                               nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1)]
    in_channels = 64
    for stage, depth in enumerate((3, 4, 23, 3)):
        for index in range(depth):
            layers.append(Bottleneck(in_channels, 64 * 2**stage, 2 if stage and not index else 1, groups=32,
                                     group_width=4))
            in_channels = 64 * 2**stage * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_channels, num_classes)]
    return nn.Sequential(*layers)
