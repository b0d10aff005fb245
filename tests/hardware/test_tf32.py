"""TF32 switching: untouched off CUDA, and both switches restored after, whether set through the legacy
`allow_tf32` or the newer `fp32_precision`."""

import pytest
import torch

from gpufeed.hardware.tf32 import tf32_flags, tf32_switched


def test_tf32_flags_are_none_and_untouched_off_cuda():
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    with tf32_flags(torch.device("cpu"), "tf32") as flags:
        assert flags == (None, None)
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before


@pytest.fixture
def legacy_tf32_flags_restored():
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (matmul.allow_tf32, cudnn.allow_tf32)
    yield matmul, cudnn
    matmul.allow_tf32, cudnn.allow_tf32 = saved  # a legacy write also makes the legacy flags readable again


def test_tf32_switch_through_the_legacy_flags(legacy_tf32_flags_restored):
    matmul, cudnn = legacy_tf32_flags_restored
    matmul.allow_tf32, cudnn.allow_tf32 = True, False  # a state neither precision sets
    for precision, inside in (("fp32", (False, False)), ("tf32", (True, True)), ("bf16", (True, False))):
        with tf32_switched(precision) as flags:
            assert flags == inside == (matmul.allow_tf32, cudnn.allow_tf32)
        assert (matmul.allow_tf32, cudnn.allow_tf32) == (True, False)


def test_tf32_switch_through_fp32_precision(legacy_tf32_flags_restored):
    matmul, cudnn = legacy_tf32_flags_restored
    matmul.fp32_precision, cudnn.conv.fp32_precision = "ieee", "tf32"  # torch now refuses legacy reads
    with tf32_switched("bf16") as flags:
        assert flags == (False, True)
    with tf32_switched("tf32") as flags:
        assert flags == (True, True)
    assert (matmul.fp32_precision, cudnn.conv.fp32_precision) == ("ieee", "tf32")
