"""PCIe link rates against figures derived by hand from the PCI-SIG line encodings."""

import pytest

from gpufeed.errors import ConfigError
from gpufeed.hardware.pcie import pcie_theoretical_gb_per_s


@pytest.mark.parametrize(
    ("generation", "width", "expected"),
    [
        (1, 1, 0.25),  # 2.5 GT/s * 8/10 / 8 bits
        (2, 16, 8.0),  # 5 GT/s * 8/10 / 8 * 16
        (3, 16, 15.754),  # 8 GT/s * 128/130 / 8 * 16 = 15.7538
        (3, 4, 3.938),  # a Thunderbolt 3/4 eGPU: PCIe 3.0 x4 = 3.9385
        (4, 16, 31.508),  # 16 GT/s * 128/130 / 8 * 16 = 31.5077
        (5, 16, 63.015),  # 32 GT/s * 128/130 / 8 * 16 = 63.0154
        (6, 16, 121.0),  # 64 GT/s * 242/256 / 8 * 16 = 121.0 (FLIT mode)
    ],
)
def test_pcie_theoretical_matches_hand_figures(generation, width, expected):
    assert pcie_theoretical_gb_per_s(generation, width) == pytest.approx(expected, abs=5e-4)


def test_pcie_theoretical_rejects_unknown_generation_and_width():
    with pytest.raises(ConfigError, match="generation"):
        pcie_theoretical_gb_per_s(9, 16)
    with pytest.raises(ConfigError, match="width"):
        pcie_theoretical_gb_per_s(4, 0)
