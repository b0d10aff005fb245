"""plan/input_cost.py and the plan's host sized from it: bytes per sample from a JPEG pack (exact) or a stated
encoding (hand arithmetic), the per-core staging rate measured through Feed, cores = rate needed / that rate,
the other decode's cores beside, what crosses the link, and the layout a user's model is planned in."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from PIL import Image

import gpufeed
from gpufeed.cli.main import main
from gpufeed.data.format.header import read_header
from gpufeed.data.format.table import read_table
from gpufeed.errors import ConfigError
from gpufeed.plan.input_cost import TYPICAL_JPEG_BYTES_AT_256, measure_input_cost, stated_bytes
from gpufeed.plan.run import PlanRequest, layout_of, trace_options


@pytest.fixture(scope="module")
def jpeg_pack(tmp_path_factory):
    """40 smooth photos of 60-100 px in two classes, packed as JPEG at max side 64."""
    root = tmp_path_factory.mktemp("photos")
    generator = np.random.default_rng(1)
    for index in range(40):
        height, width = (int(side) for side in generator.integers(60, 100, 2))
        base = generator.integers(0, 255, (height // 8 + 1, width // 8 + 1, 3)).astype(np.uint8)
        image = Image.fromarray(base).resize((width, height), Image.BICUBIC)
        (root / f"c{index % 2}").mkdir(exist_ok=True)
        image.save(root / f"c{index % 2}" / f"{index}.png")
    packed = root.parent / "photos.gpuf"
    gpufeed.pack(root, packed, max_side=64, encoding="jpeg", quality=90, workers=0)
    return packed


def test_stated_bytes_by_hand():
    assert stated_bytes("jpeg", 256)[0] == TYPICAL_JPEG_BYTES_AT_256 == 16_800
    assert stated_bytes("jpeg", 512)[0] == 4 * 16_800  # the area, four times
    assert stated_bytes("raw", 256)[0] == 256 * 192 * 3 == 147_456  # 4:3 at max side 256
    assert "benchmarks/RESULTS.md" in stated_bytes("jpeg", 256)[1]


@pytest.mark.timing
def test_a_jpeg_packs_bytes_are_its_own_and_both_decodes_are_measured(jpeg_pack):
    header = read_header(jpeg_pack)
    table = read_table(jpeg_pack, header)
    cost = measure_input_cost(str(jpeg_pack), None, None, (32, 32))
    assert cost.encoding == "jpeg" and cost.decode == "cpu"
    assert cost.bytes_per_sample == round(int(table.lengths.sum()) / header.count)
    assert cost.per_core_rate > 0 and "decodes, random-resized-crops and resizes to 32x32" in cost.per_core_reason
    # gathering bytes costs less than decoding them: two measured rates, 9x to 12x apart here, under load too
    assert cost.other_per_core_rate > cost.per_core_rate
    on_gpu = measure_input_cost(str(jpeg_pack), None, None, (32, 32), decode="gpu")
    assert on_gpu.decode == "gpu" and "the JPEG bytes and crop boxes" in on_gpu.per_core_reason


def test_gpu_decode_of_raw_samples_and_bad_names_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="--decode gpu decodes JPEG samples"):
        measure_input_cost(None, "raw", 32, (16, 16), decode="gpu")
    with pytest.raises(ConfigError, match="unknown --encoding"):
        measure_input_cost(None, "png", 32, (16, 16))
    assert measure_input_cost(None, None, None, (16, 16)) is None


@pytest.mark.timing
def test_the_plan_sizes_disk_cores_and_link_from_the_pack(jpeg_pack, capsys):
    header = read_header(jpeg_pack)
    table = read_table(jpeg_pack, header)
    status = main(["plan", "--model", "mlp", "--data", str(jpeg_pack), "--image-size", "32",
                   "--dataset-size", "100000", "--gpu", "4090", "--epochs", "1", "--json", "-"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    document = json.loads(captured.out)
    host, stored = document["host"], round(int(table.lengths.sum()) / header.count)
    assert host["bytes_per_sample"] == stored and host["decode"] == "cpu"
    assert document["request"]["data"] == str(jpeg_pack)
    # the disk holds the packed set (100,000 x stored) twice by default (source as large) and the checkpoints
    checkpoint = document["params"] * 12
    assert host["disk_bytes"] == 2 * 100_000 * stored + 4 * checkpoint
    # cores = ceil(the GPU's fast-end rate / the measured per-core rate) + 1; the rate needed is in the reason
    needed = float(host["cpu_reason"].split(" samples/s")[0].replace(",", ""))
    per_core = float(host["cpu_reason"].split(" per core")[0].rsplit("/ ", 1)[1].replace(",", ""))
    assert host["cpu_cores"] == math.ceil(needed / per_core) + 1
    # from the two measured rates above, 9x to 12x apart
    assert host["cpu_cores_other_decode"] is not None and host["cpu_cores_other_decode"] <= host["cpu_cores"]
    # the CPU decodes, so decoded uint8 crops (3 x 32 x 32) cross the link, not the JPEG bytes
    link_gb_per_s = float(host["link_notes"][0].split("needs ")[1].split(" GB/s")[0])
    assert link_gb_per_s == pytest.approx(needed * 3 * 32 * 32 / 1e9, abs=0.006)


def test_a_users_model_is_planned_nchw_unless_channels_last_is_given():
    user = PlanRequest(model="net.py:make", input_shape=(3, 224, 224))
    assert trace_options(user) == {} and layout_of(user) == "NCHW (contiguous)"
    chosen = PlanRequest(model="net.py:make", input_shape=(3, 224, 224), channels_last=True)
    assert trace_options(chosen) == {"channels_last": True} and layout_of(chosen) == "channels_last"
    assert trace_options(PlanRequest(model="resnet18", input_shape=(3, 32, 32)))["channels_last"] is True


def test_the_gpu_decode_rate_of_a_raw_pack_is_refused_in_the_feeds_terms(tmp_path):
    packed = tmp_path / "b.gpuf"
    gpufeed.pack("builtin", packed, count=64)
    feed = gpufeed.Feed(packed, 8, device="cpu")
    assert feed.staging_rate(0.01) > 0
    with pytest.raises(ConfigError, match="holds raw samples and the feed's augment has no resized crop: "
                                          "use decode='cpu'"):
        feed.staging_rate(0.01, decode="gpu")
