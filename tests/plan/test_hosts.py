"""Systems as sold: SXM/OAM parts on 4- or 8-GPU boards, PCIe cards 1-8 in a workstation or server; the server
power rule by hand and against NVIDIA's reference systems."""

import pytest

from gpufeed.hardware.catalog import load_catalog, match_gpu
from gpufeed.plan.hosts import server_power, system_to_buy


@pytest.mark.parametrize("name, gpus, per_system, systems, kind", [
    ("b200", 1, 8, 1, "server"),  # HGX B200 is an 8-GPU board only
    ("h100 sxm", 1, 4, 1, "server"), ("h100 sxm", 4, 4, 1, "server"), ("h100 sxm", 5, 8, 1, "server"),
    ("h100 sxm", 16, 8, 2, "server"), ("h100 sxm", 12, 8, 2, "server"),  # an even share of 6 fills an 8-GPU board
    ("mi300x", 2, 8, 1, "server"),
    ("4090", 1, 1, 1, "workstation"), ("4090", 4, 4, 1, "workstation"), ("4090", 6, 6, 1, "server"),
    ("4090", 10, 5, 2, "server"), ("h100 pcie", 3, 3, 1, "workstation"),
])
def test_system_to_buy(name, gpus, per_system, systems, kind):
    bought = system_to_buy(match_gpu(name), gpus)
    assert (bought.gpus_per_system, bought.systems, bought.kind) == (per_system, systems, kind)
    assert bought.gpus >= gpus
    assert ("bought for a run on" in bought.text) == (bought.gpus > gpus)


def test_the_words():
    assert system_to_buy(match_gpu("b200"), 1).text == ("an 8-GPU SXM baseboard server (NVIDIA B200 (HGX) is sold "
                                                        "only on 8-GPU boards); 8 GPUs bought for a run on 1")
    assert "4- or 8-GPU boards" in system_to_buy(match_gpu("h100 sxm"), 8).text
    assert system_to_buy(match_gpu("4090"), 10).text == "2 servers with 5 cards each"


def test_server_power_by_hand():
    # 8 x 700 + 2 x 350 + 0.7 x 5,600 = 10,220 W; ceil(10,220 / 3,000) = 4 supplies carry it, 8 fitted
    watts, text = server_power(700.0, 8, match_gpu("h100 sxm"))
    assert watts == 12_000
    assert "10,220 W" in text and "4 x 3,000 W" in text and "8 fitted" in text
    assert "NVIDIA DGX H100 states 10,200 W at most" in text
    # a 4-GPU board: 2,800 + 700 + 1,960 = 5,460 W -> 2 supplies; no reference system for 4 GPUs
    watts, text = server_power(700.0, 4, match_gpu("h100 sxm"))
    assert watts == 6000 and "5,460 W" in text and "DGX" not in text


def test_the_rule_against_every_reference_system():
    """Within 40% of each 8-GPU reference system's stated maximum power (DGX-1 is the worst, 37% over)."""
    checked = 0
    for spec in load_catalog():
        if spec.reference_system:
            load = float(server_power(spec.tdp_w, 8)[1].split(" = ")[1].split(" W")[0].replace(",", ""))
            assert abs(load / spec.reference_system_power_w - 1) <= 0.4, (spec.name, load)
            checked += 1
    assert checked == 7
