"""The models `gpufeed train` can build, in plain torch: a multilayer perceptron, a small fast convnet,
ResNet-18 and ResNet-50 (v1.5). Each takes a float batch (B, C, H, W), contiguous or channels_last, and returns
logits (B, classes).

Parameter counts for a 3x32x32 input and 10 classes (each class docstring repeats its own):

| name       | defaults                            | parameters |
|------------|-------------------------------------|-----------:|
| `mlp`      | hidden (512, 256)                   |  1,707,274 |
| `mlp`      | hidden () (a linear classifier)     |     30,730 |
| `cnn`      | width 32: stem 16, blocks 32-64-128 |   292,954 |
| `resnet18` | width 64: stages 64-128-256-512     | 11,173,962 |
| `resnet50` | width 64: stages 256-512-1024-2048  | 23,520,842 |

For 1000 classes at 224x224 (the ImageNet stem): ResNet-18 11,689,512 and ResNet-50 25,557,032 parameters,
exactly torchvision's `resnet18` and `resnet50`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from gpufeed.errors import ConfigError

MODELS = ("mlp", "cnn", "resnet18", "resnet50")

CNN_DEFAULT_WIDTH = 32
RESNET_DEFAULT_WIDTH = 64
LARGEST_CNN_INPUT = 64  # the CNN's stem halves the input until its larger side is at most this
LARGEST_CIFAR_STEM_INPUT = 64  # ResNet-18 takes the CIFAR stem up to this size, the ImageNet stem above it


class MLP(nn.Module):
    """flatten -> [Linear -> ReLU] per hidden size -> Linear; `hidden=()` is a linear classifier.

    3x32x32 input, 10 classes: 1,707,274 parameters with hidden (512, 256); 30,730 with hidden ().
    """

    def __init__(self, in_features: int, hidden: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for size in hidden:
            layers += [nn.Linear(in_features, size), nn.ReLU(inplace=True)]
            in_features = size
        layers.append(nn.Linear(in_features, num_classes))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (B, C, H, W) -> (B, C*H*W) in logical order, whatever the memory format (channels_last is copied)
        return self.layers(torch.flatten(x, 1))


def conv_bn_relu(in_channels: int, out_channels: int, stride: int = 1, pool: bool = False) -> nn.Sequential:
    """3x3 conv (no bias: the BN's shift replaces it) -> [maxpool 2] -> BN -> ReLU, as airbench orders them:
    pooling before the norm and activation makes those run on a quarter of the pixels."""
    layers: list[nn.Module] = [nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)]
    if pool:
        layers.append(nn.MaxPool2d(2, ceil_mode=True))
    layers += [nn.BatchNorm2d(out_channels), nn.ReLU(inplace=True)]
    return nn.Sequential(*layers)


def stem_halvings(size: int, largest: int = LARGEST_CNN_INPUT) -> int:
    """How many times the CNN's stem halves (rounding up) a side of `size` pixels to reach at most `largest`:
    0 for 28 or 32, 2 for 224 (224 -> 112 -> 56), 3 for 512."""
    halvings = 0
    while size > largest:
        size = math.ceil(size / 2)
        halvings += 1
    return halvings


class CNN(nn.Module):
    """A small fast convnet after airbench and the Myrtle/Page DAWNBench ResNet-9 (without their residuals):

    stem: 3x3 conv -> BN -> ReLU, width/2 channels; on inputs whose larger side exceeds 64 px its conv has
          stride 2 and max pools of 2 follow until the side is at most 64 (224 -> 112 -> 56), so the blocks
          cost at most what they cost on a 64 px input.
    3 blocks, widths (width, 2*width, 4*width), each: conv -> maxpool 2 -> BN -> ReLU -> conv -> BN -> ReLU.
    head: global max pool -> Linear (with bias, no fixed output scale, so that ordinary learning rates work).

    The default width 32 (stem 16, blocks 32-64-128) is sized for a 2-core CPU: 292,954 parameters for
    3x32x32 and 10 classes, 21.7 M multiply-adds per 32x32 image forward; forward+backward of a batch of 256
    took a median 190 ms (about 1,350 images/s; float32, channels_last, torch 2.13 CPU, 2 threads of a Xeon
    with AVX-512, no other process on the cores). The stem is half as wide as the first block because its
    BN and ReLU run on every pixel and on a CPU cost as much as the convs (a 32-wide stem: 1.6x slower).
    On a GPU, width 64 (1.17 M parameters) or 128 (stem 64, blocks 128-256-512, near the ResNet-9 widths).
    """

    def __init__(self, in_channels: int, size: int, num_classes: int, width: int = CNN_DEFAULT_WIDTH) -> None:
        super().__init__()
        halvings = stem_halvings(size)
        stem_width = max(width // 2, 1)
        stem: list[nn.Module] = [conv_bn_relu(in_channels, stem_width, stride=2 if halvings else 1)]
        stem += [nn.MaxPool2d(2, ceil_mode=True) for _ in range(halvings - 1)]
        self.stem = nn.Sequential(*stem)
        blocks: list[nn.Module] = []
        in_width = stem_width
        for out_width in (width, 2 * width, 4 * width):
            blocks += [conv_bn_relu(in_width, out_width, pool=True), conv_bn_relu(out_width, out_width)]
            in_width = out_width
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveMaxPool2d(1)
        self.head = nn.Linear(in_width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))  # (B, 4*width, H/8, W/8) for inputs up to 64 px
        return self.head(torch.flatten(self.pool(x), 1))  # (B, 4*width) -> (B, classes)


def shortcut(in_channels: int, out_channels: int, stride: int) -> nn.Module:
    """A residual block's shortcut: the identity, or a 1x1 conv + BN projection when the shape changes."""
    if stride == 1 and in_channels == out_channels:
        return nn.Identity()
    return nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                         nn.BatchNorm2d(out_channels))


class BasicBlock(nn.Module):
    """ResNet's two-conv residual block; a 1x1 conv + BN projects the shortcut when the shape changes."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = shortcut(in_channels, out_channels, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class Bottleneck(nn.Module):
    """ResNet-50's block, v1.5 as torchvision and NVIDIA's DeepLearningExamples: 1x1 conv -> 3x3 conv (it carries
    the stride) -> 1x1 conv to 4x the width, each followed by BN (ReLU after the first two); a 1x1 conv + BN
    projects the shortcut when the shape changes."""

    expansion = 4

    def __init__(self, in_channels: int, planes: int, stride: int, groups: int = 1, group_width: int = 64) -> None:
        """`groups` and `group_width` make it ResNeXt's block (Xie et al. 2017; 32 and 4 for 32x4d): the 3x3 conv
        runs in `groups` groups on planes x group_width / 64 x groups channels; 1 and 64 are ResNet-50's."""
        super().__init__()
        width, out_channels = planes * group_width // 64 * groups, planes * self.expansion
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = shortcut(in_channels, out_channels, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + self.shortcut(x))


# name -> (block, blocks per stage), as in He et al. 2015, table 1
RESNETS = {"resnet18": (BasicBlock, (2, 2, 2, 2)), "resnet50": (Bottleneck, (3, 4, 6, 3))}


class ResNet(nn.Module):
    """ResNet (He et al. 2015) laid out as torchvision's: four stages of widths 64-128-256-512 (times the block's
    expansion: 1 for ResNet-18's BasicBlock, 4 for ResNet-50's Bottleneck), BN and ReLU, adaptive average pool,
    fc. PyTorch's default init (no zero-init of the last BN in a block).

    Stem: for inputs up to 64 px the CIFAR stem (3x3 conv, stride 1, no max pool); above that the ImageNet
    stem (7x7 conv stride 2, then 3x3 max pool stride 2).
    Parameters, ResNet-18: 11,173,962 for 3x32x32 and 10 classes; 11,689,512 for 3x224x224 and 1000 classes.
    ResNet-50 (v1.5): 25,557,032 for 3x224x224 and 1000 classes. Both torchvision's counts.
    """

    def __init__(self, name: str, in_channels: int, size: int, num_classes: int,
                 width: int = RESNET_DEFAULT_WIDTH) -> None:
        super().__init__()
        block, depths = RESNETS[name]
        if size <= LARGEST_CIFAR_STEM_INPUT:
            stem: list[nn.Module] = [nn.Conv2d(in_channels, width, 3, padding=1, bias=False)]
        else:
            stem = [nn.Conv2d(in_channels, width, 7, stride=2, padding=3, bias=False)]
        stem += [nn.BatchNorm2d(width), nn.ReLU(inplace=True)]
        if size > LARGEST_CIFAR_STEM_INPUT:
            stem.append(nn.MaxPool2d(3, stride=2, padding=1))
        self.stem = nn.Sequential(*stem)
        blocks: list[nn.Module] = []
        in_width = width
        for stage, depth in enumerate(depths):
            stage_width = width * 2**stage
            for index in range(depth):
                stride = 2 if stage > 0 and index == 0 else 1
                blocks.append(block(in_width, stage_width, stride))
                in_width = stage_width * getattr(block, "expansion", 1)
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))  # (B, 8*width*expansion, H/8, W/8) with the CIFAR stem, H/32 with the other
        return self.fc(torch.flatten(self.pool(x), 1))  # (B, 8*width*expansion) -> (B, classes)


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _check_arguments(
    name: str, sample_shape: Sequence[int], num_classes: int, hidden: Sequence[int], width: int | None
) -> None:
    if name not in MODELS:
        choices = ", ".join(repr(m) for m in MODELS)
        raise ConfigError(f"unknown model {name!r}; choose one of {choices}")
    if len(sample_shape) != 3 or not all(_positive_int(s) for s in sample_shape):
        raise ConfigError(f"sample shape must be three positive ints (channels, height, width), got {sample_shape}")
    if not _positive_int(num_classes) or num_classes < 2:
        raise ConfigError(f"a classifier needs at least 2 classes, got {num_classes!r}")
    if not all(_positive_int(size) for size in hidden):
        raise ConfigError(f"hidden layer sizes must be positive ints, got {tuple(hidden)}; e.g. --hidden 512,256")
    if width is not None and not _positive_int(width):
        raise ConfigError(f"model width must be a positive int, got {width!r}")
    if width is not None and name == "mlp":
        raise ConfigError("width applies to 'cnn' and the resnets; size the mlp with its hidden layers instead")
    if name == "cnn" and min(sample_shape[1:]) < 8:
        raise ConfigError(f"the cnn pools 3 times and needs images of at least 8x8, got {sample_shape}")


def build_model(
    name: str,
    sample_shape: tuple[int, int, int],
    num_classes: int,
    hidden: tuple[int, ...] = (512, 256),
    width: int | None = None,
) -> nn.Module:
    """The model `name` (one of MODELS) for samples of shape (C, H, W) and `num_classes` classes.

    `hidden` sizes the MLP's hidden layers (() for a linear classifier); `width` is the CNN's first block width
    (default 32) or the ResNets' first stage width (default 64). Raises ConfigError for anything it cannot build.
    """
    hidden = tuple(hidden)
    _check_arguments(name, sample_shape, num_classes, hidden, width)
    channels, height, image_width = sample_shape
    size = max(height, image_width)
    if name == "mlp":
        return MLP(channels * height * image_width, hidden, num_classes)
    if name == "cnn":
        return CNN(channels, size, num_classes, width or CNN_DEFAULT_WIDTH)
    return ResNet(name, channels, size, num_classes, width or RESNET_DEFAULT_WIDTH)


def parameter_count(model: nn.Module) -> int:
    """The number of parameters (trainable or not; BN running statistics are buffers and do not count)."""
    return sum(p.numel() for p in model.parameters())
