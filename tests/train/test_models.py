"""The models: output shapes on each input kind, parameter counts against hand arithmetic (and torchvision's
published ResNet-18 figure), gradients to every parameter, overfitting a tiny batch, memory-format invariance
and argument checks."""

import math
from itertools import pairwise

import pytest
import torch
from torch import nn

from gpufeed.errors import ConfigError
from gpufeed.train.models import MODELS, build_model, parameter_count, stem_halvings


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """These batches are tiny: one thread is as fast, and two threads slow down 5-10x when another process
    holds one of two cores (measured: the whole file took 7 s alone, 20-40 s with a neighbour)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# (sample shape (C, H, W), classes, batch): grey digits, colour thumbnails, photos
INPUT_KINDS = [((1, 28, 28), 10, 4), ((3, 32, 32), 10, 4), ((3, 224, 224), 1000, 2)]


def linear_parameters(in_features: int, out_features: int) -> int:
    return in_features * out_features + out_features  # weight + bias


def conv_bn_parameters(in_channels: int, out_channels: int, kernel: int) -> int:
    return in_channels * out_channels * kernel * kernel + 2 * out_channels  # bias-free conv + BN gamma, beta


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("sample_shape, classes, batch", INPUT_KINDS)
def test_output_shape_for_each_input_kind(name, sample_shape, classes, batch):
    torch.manual_seed(0)
    # the default MLP on 224x224x3 would hold 77 M parameters; a narrow one shows the same shapes
    hidden = (32,) if sample_shape[1] == 224 else (512, 256)
    model = build_model(name, sample_shape, classes, hidden=hidden)
    with torch.no_grad():
        logits = model(torch.randn(batch, *sample_shape))
    assert logits.shape == (batch, classes)
    assert torch.isfinite(logits).all()


def test_mlp_parameter_count_by_hand():
    model = build_model("mlp", (3, 32, 32), 10, hidden=(512, 256))
    expected = linear_parameters(3 * 32 * 32, 512) + linear_parameters(512, 256) + linear_parameters(256, 10)
    assert expected == 3072 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10 == 1_707_274
    assert parameter_count(model) == expected


def test_linear_classifier_parameter_count():
    model = build_model("mlp", (3, 32, 32), 10, hidden=())
    assert parameter_count(model) == linear_parameters(3072, 10) == 30_730
    assert sum(isinstance(m, nn.Linear) for m in model.modules()) == 1


def test_cnn_parameter_count_by_hand():
    width = 32
    widths = [width // 2, width, 2 * width, 4 * width]  # stem, then the three blocks
    expected = conv_bn_parameters(3, width // 2, 3)
    for in_width, out_width in pairwise(widths):
        expected += conv_bn_parameters(in_width, out_width, 3) + conv_bn_parameters(out_width, out_width, 3)
    expected += linear_parameters(4 * width, 10)
    assert parameter_count(build_model("cnn", (3, 32, 32), 10)) == expected == 292_954
    assert parameter_count(build_model("cnn", (3, 32, 32), 10, width=width)) == expected


def resnet18_parameters_by_hand(in_channels: int, classes: int, stem_kernel: int) -> int:
    total = conv_bn_parameters(in_channels, 64, stem_kernel)
    in_width = 64
    for out_width in (64, 128, 256, 512):
        total += conv_bn_parameters(in_width, out_width, 3) + conv_bn_parameters(out_width, out_width, 3)
        if in_width != out_width:
            total += conv_bn_parameters(in_width, out_width, 1)  # projection shortcut
        total += 2 * conv_bn_parameters(out_width, out_width, 3)  # second block of the stage
        in_width = out_width
    return total + linear_parameters(512, classes)


def test_resnet18_matches_torchvision_parameter_count_at_224():
    model = build_model("resnet18", (3, 224, 224), 1000)
    assert parameter_count(model) == resnet18_parameters_by_hand(3, 1000, stem_kernel=7) == 11_689_512


def test_resnet18_cifar_stem_parameter_count():
    model = build_model("resnet18", (3, 32, 32), 10)
    assert parameter_count(model) == resnet18_parameters_by_hand(3, 10, stem_kernel=3) == 11_173_962
    first_conv = next(m for m in model.modules() if isinstance(m, nn.Conv2d))
    assert first_conv.kernel_size == (3, 3) and first_conv.stride == (1, 1)
    assert not any(isinstance(m, nn.MaxPool2d) for m in model.modules())


def test_resnet18_imagenet_stem_above_64_px():
    model = build_model("resnet18", (3, 224, 224), 1000)
    first_conv = next(m for m in model.modules() if isinstance(m, nn.Conv2d))
    assert first_conv.kernel_size == (7, 7) and first_conv.stride == (2, 2)
    assert sum(isinstance(m, nn.MaxPool2d) for m in model.modules()) == 1


def resnet50_parameters_by_hand(in_channels: int, classes: int, stem_kernel: int) -> int:
    """Bottleneck v1.5: 1x1 (in -> w), 3x3 (w -> w, the stride), 1x1 (w -> 4w), each with BN; a 1x1 projection
    where the channels change (the first block of each stage)."""
    total = conv_bn_parameters(in_channels, 64, stem_kernel)
    in_width = 64
    for width, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for _ in range(blocks):
            total += (conv_bn_parameters(in_width, width, 1) + conv_bn_parameters(width, width, 3)
                      + conv_bn_parameters(width, 4 * width, 1))
            if in_width != 4 * width:
                total += conv_bn_parameters(in_width, 4 * width, 1)
            in_width = 4 * width
    return total + linear_parameters(2048, classes)


def test_resnet50_matches_torchvision_parameter_count_at_224():
    model = build_model("resnet50", (3, 224, 224), 1000)
    assert parameter_count(model) == resnet50_parameters_by_hand(3, 1000, stem_kernel=7) == 25_557_032


def test_resnet50_is_v1_5_the_stride_in_the_3x3_convolution():
    model = build_model("resnet50", (3, 224, 224), 1000)
    strided = [m for m in model.blocks.modules() if isinstance(m, nn.Conv2d) and m.stride == (2, 2)]
    # three stages downsample: each with its 3x3 conv and its projection shortcut, no strided 1x1 in the path
    assert sorted(m.kernel_size for m in strided) == [(1, 1)] * 3 + [(3, 3)] * 3
    with torch.no_grad():
        assert model(torch.randn(1, 3, 224, 224)).shape == (1, 1000)
    assert parameter_count(build_model("resnet50", (3, 32, 32), 10)) == \
        resnet50_parameters_by_hand(3, 10, stem_kernel=3) == 23_520_842


def test_cnn_stem_brings_large_inputs_to_at_most_64_px():
    assert [stem_halvings(s) for s in (28, 32, 64, 65, 224, 512)] == [0, 0, 0, 1, 2, 3]
    model = build_model("cnn", (3, 224, 224), 1000)
    with torch.no_grad():
        after_stem = model.stem(torch.randn(1, 3, 224, 224))
    assert after_stem.shape[-2:] == (56, 56)


@pytest.mark.parametrize("name", MODELS)
def test_gradient_reaches_every_parameter(name):
    torch.manual_seed(0)
    model = build_model(name, (3, 32, 32), 10)
    loss = nn.functional.cross_entropy(model(torch.randn(4, 3, 32, 32)), torch.randint(0, 10, (4,)))
    loss.backward()
    for parameter_name, parameter in model.named_parameters():
        assert parameter.grad is not None, parameter_name
        assert torch.isfinite(parameter.grad).all(), parameter_name
        assert parameter.grad.abs().sum() > 0, parameter_name


@pytest.mark.parametrize("name, learning_rate", [("mlp", 0.05), ("cnn", 0.05), ("resnet18", 0.02)])
def test_a_few_sgd_steps_overfit_a_tiny_batch(name, learning_rate):
    torch.manual_seed(0)
    images, labels = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    model = build_model(name, (3, 32, 32), 10, width=16 if name == "resnet18" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate, momentum=0.9)
    losses = []
    for _ in range(8):
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[0] > 0.9 * math.log(10)  # starts near chance
    assert losses[-1] < 0.5 * losses[0], losses


@pytest.mark.parametrize("name", MODELS)
def test_channels_last_input_gives_the_same_output(name):
    torch.manual_seed(0)
    model = build_model(name, (3, 32, 32), 10).eval()
    images = torch.randn(4, 3, 32, 32)
    channels_last = images.contiguous(memory_format=torch.channels_last)
    assert not channels_last.is_contiguous()  # really another layout, else the test could not fail
    with torch.no_grad():
        expected = model(images)
        assert torch.allclose(model(channels_last), expected, atol=1e-5, rtol=0)
        model = model.to(memory_format=torch.channels_last)
        assert torch.allclose(model(channels_last), expected, atol=1e-5, rtol=0)


def test_grey_input_uses_one_input_channel():
    for name in ("cnn", "resnet18"):
        model = build_model(name, (1, 28, 28), 10)
        first_conv = next(m for m in model.modules() if isinstance(m, nn.Conv2d))
        assert first_conv.in_channels == 1


def test_width_scales_the_convnets():
    narrow = build_model("cnn", (3, 32, 32), 10, width=16)
    assert parameter_count(narrow) < parameter_count(build_model("cnn", (3, 32, 32), 10))
    assert parameter_count(build_model("resnet18", (3, 32, 32), 10, width=32)) < 11_173_962


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"name": "vgg16"}, "'mlp', 'cnn', 'resnet18'"),
        ({"name": "mlp", "hidden": (512, 0)}, "positive ints"),
        ({"name": "mlp", "hidden": (-3,)}, "positive ints"),
        ({"name": "mlp", "hidden": (2.5,)}, "positive ints"),
        ({"name": "mlp", "hidden": (True,)}, "positive ints"),
        ({"name": "mlp", "width": 32}, "hidden"),
        ({"name": "cnn", "width": 0}, "width"),
        ({"name": "cnn", "num_classes": 1}, "at least 2 classes"),
        ({"name": "cnn", "sample_shape": (3, 32)}, "three positive ints"),
        ({"name": "cnn", "sample_shape": (3, 4, 4)}, "at least 8x8"),
    ],
)
def test_bad_arguments_raise_config_error(kwargs, message):
    arguments = {"sample_shape": (3, 32, 32), "num_classes": 10, **kwargs}
    with pytest.raises(ConfigError, match=message):
        build_model(**arguments)
