"""The traced traffic of a step against bytes counted by hand, its FLOPs against the FLOP count, and the layout."""

import pytest
from torch import nn

from gpufeed.errors import ConfigError
from gpufeed.plan.compute import flops_per_step
from gpufeed.plan.traffic import trace_traffic
from gpufeed.train.models import build_model

LINEAR = lambda: nn.Sequential(nn.Flatten(), nn.Linear(12, 5))  # noqa: E731 - a factory


def operators(traffic, name, optimizer=False):
    return [op for op in traffic.operators if op.name == name and op.optimizer == optimizer]


def test_a_linear_layer_by_hand():
    traffic = trace_traffic(LINEAR, (3, 2, 2), 8, 5, "fp32", "sgd", device_type="cpu")
    (forward,) = operators(traffic, "addmm")
    # bias (5) + batch (8 x 12) + weight (12 x 5, through a view) + output (8 x 5), fp32: 4 x 201 = 804 bytes
    assert forward.bytes == 4 * (5 + 8 * 12 + 12 * 5 + 8 * 5) == 804
    assert forward.flops == 2 * 8 * 12 * 5 and forward.kind == "matmul" and forward.dtype == "float32"
    # the weight gradient: grad_output^T (5 x 8) @ batch (8 x 12) -> (5 x 12); the batch needs no gradient
    (backward,) = operators(traffic, "mm")
    assert backward.bytes == 4 * (5 * 8 + 8 * 12 + 5 * 12) and backward.flops == 2 * 8 * 12 * 5
    assert traffic.flops == 2 * 960  # forward + weight gradient, no optimizer FLOPs
    assert not any(op.name in ("t", "view", "detach", "_record_function_enter_new") for op in traffic.operators)
    # SGD with momentum, one weight (60) and one bias (5): buf *= 0.9 reads and writes the buffer; buf += grad and
    # param -= lr * buf each read two and write one
    assert traffic.optimizer_bytes == 4 * (2 * 60 + 2 * 3 * 60 + 2 * 5 + 2 * 3 * 5)
    assert traffic.bytes == sum(op.bytes * op.count for op in traffic.operators if not op.optimizer)


def test_flops_equal_the_flop_count_and_bf16_moves_fewer_bytes():
    factory = lambda: build_model("resnet18", (3, 64, 64), 10)  # noqa: E731
    fp32 = trace_traffic(factory, (3, 64, 64), 16, 10, "fp32", "adamw", channels_last=True)
    bf16 = trace_traffic(factory, (3, 64, 64), 16, 10, "bf16", "adamw", channels_last=True)
    assert fp32.flops == bf16.flops == flops_per_step(factory(), (3, 64, 64), 16, 10)
    # activations in bf16 are half the bytes, the fp32 weights, gradients and optimizer state are not
    assert 0.45 < bf16.bytes / fp32.bytes < 0.75
    assert bf16.optimizer_bytes == fp32.optimizer_bytes
    assert {op.dtype for op in bf16.operators if op.kind == "convolution"} == {"bfloat16"}
    assert trace_traffic(factory, (3, 64, 64), 16, 10, "tf32", "adamw").precision == "tf32"


def test_nchw_convolutions_report_their_activation_bytes():
    factory = lambda: nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, bias=False), nn.Flatten(),  # noqa: E731
                                    nn.Linear(4 * 4 * 4, 5))
    nchw = trace_traffic(factory, (3, 4, 4), 2, 5, "bf16", "sgd", device_type="cpu")
    (forward,) = operators(nchw, "convolution")
    assert forward.nchw_bytes == 2 * (2 * 3 * 4 * 4 + 2 * 4 * 4 * 4)  # bf16 input and output of a batch of 2
    (backward,) = operators(nchw, "convolution_backward")
    assert backward.nchw_bytes == 2 * (2 * 4 * 4 * 4 + 2 * 3 * 4 * 4)  # grad_output and input; no grad_input
    channels_last = trace_traffic(factory, (3, 4, 4), 2, 5, "bf16", "sgd", device_type="cpu", channels_last=True)
    assert all(op.nchw_bytes == 0 for op in channels_last.operators)


def test_wrong_input_is_a_config_error():
    with pytest.raises(ConfigError, match="choose one of"):
        trace_traffic(LINEAR, (3, 2, 2), 8, 5, "int8")
    with pytest.raises(ConfigError, match="batch size"):
        trace_traffic(LINEAR, (3, 2, 2), 0, 5)
    with pytest.raises(ConfigError, match="could not trace"):
        trace_traffic(LINEAR, (3, 3, 3), 8, 5, "fp32", "sgd")
