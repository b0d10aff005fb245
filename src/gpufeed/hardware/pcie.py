"""PCIe link rates: what a link of a given generation and width can carry, one direction, in GB/s (1e9 bytes per
second), and the width below which a link is narrow for feeding a GPU. bench's link measurement (bench/link.py)
compares its copies with them; the planner's host advice (plan/system.py) sizes a system's links by them.
"""

from __future__ import annotations

from gpufeed.errors import ConfigError

# Per lane, per direction: (transfer rate in GT/s, payload share after line encoding). Source: the PCI-SIG base
# specifications; gen1-2 use 8b/10b, gen3-5 128b/130b, gen6 FLIT mode (242 payload bytes of 256, PAM4).
PCIE_LANE_RATES = {1: (2.5, 8 / 10), 2: (5.0, 8 / 10), 3: (8.0, 128 / 130), 4: (16.0, 128 / 130),
                   5: (32.0, 128 / 130), 6: (64.0, 242 / 256)}

NARROW_THEORETICAL_GB_PER_S = 8.0  # at or below: PCIe 3.0 x8, 4.0 x4, Thunderbolt 3/4 (PCIe 3.0 x4 inside)


def pcie_theoretical_gb_per_s(generation: int, width: int) -> float:
    """Payload GB/s one direction of a PCIe link after line encoding (before packet overhead, which costs
    another few percent): gen3 x16 15.75, gen4 x16 31.5, gen3 x4 (a Thunderbolt eGPU) 3.94."""
    if generation not in PCIE_LANE_RATES:
        raise ConfigError(f"unknown PCIe generation {generation!r}; known: {', '.join(map(str, PCIE_LANE_RATES))}")
    if not isinstance(width, int) or width <= 0:
        raise ConfigError(f"PCIe width must be a positive number of lanes, got {width!r}")
    transfers_per_s, payload_share = PCIE_LANE_RATES[generation]
    return transfers_per_s * payload_share / 8 * width  # 1 bit per transfer per lane, 8 bits a byte
