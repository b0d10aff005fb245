"""The machine one buys around the GPUs: the system a GPU is sold in, and the power it draws.

To buy:
- SXM and OAM modules come only on 4- or 8-GPU baseboards (HGX boards, AMD's 8-module OAM platform; the catalog's
  `system_gpus` says which sizes): N GPUs are the smallest size that holds N; beyond 8, the fewest systems,
  each of the smallest size that holds its even share.
  Such a system is a server: two server CPUs and redundant power supplies.
- PCIe cards go 1 to 8 in one machine: up to WORKSTATION_MAX_CARDS in a workstation (one CPU, an ATX supply),
  more in a server; beyond 8, the fewest servers, the cards split evenly.
To rent, any count of any GPU: clouds price them per GPU-hour (rank.py), so renting needs no system here.

A server's power is a rule of thumb checked against NVIDIA's reference systems: the GPUs' TDP + two server CPUs
+ the platform (fans, NVSwitches, network cards, drives) at PLATFORM_SHARE of the GPUs' TDP. DGX H100 states
10.2 kW at most: 8 x 700 + 2 x 350 + 0.7 x 5,600 = 10,220 W; DGX B200 14.3 kW: 8,000 + 700 + 5,600 = 14,300 W;
DGX A100 6.5 kW: 3,200 + 700 + 2,240 = 6,140 W (6% under); DGX-1 (V100) 3.5 kW: 4,780 W (37% over).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpufeed.hardware.catalog import GpuSpec

WORKSTATION_MAX_CARDS = 4  # double-width cards on a workstation board (4 x16 slots at two-slot spacing)
SERVER_CPU_TDP_W = 350.0  # one Xeon Platinum 8480C (DGX H100's CPUs); EPYC 7742 (DGX A100's) is 225 W
SERVER_CPUS = 2
PLATFORM_SHARE = 0.7  # fans, NVSwitches, NICs, drives, as a share of the GPUs' TDP (see the docstring)
SERVER_SUPPLY_W = 3000  # one server power supply; DGX A100 carries its 6.5 kW on 3 + 3 redundant 3 kW supplies


@dataclass(frozen=True)
class BoughtSystem:
    """`systems` machines of `gpus_per_system` GPUs each, of `kind` (workstation or server), in words."""

    gpus_per_system: int
    systems: int
    kind: str
    text: str

    @property
    def gpus(self) -> int:
        return self.gpus_per_system * self.systems


def system_to_buy(spec: GpuSpec, gpus: int) -> BoughtSystem:
    """The system(s) that hold `gpus` of `spec` as they are sold."""
    sizes = spec.system_gpus
    largest = max(sizes)
    systems = math.ceil(gpus / largest)
    share = math.ceil(gpus / systems)  # cards split evenly across the systems; a board is filled to a size sold
    per_system = min(size for size in sizes if size >= share)
    if spec.sold_as_systems:
        kind = "server"
        unit = f"{per_system}-GPU {spec.form_factor} baseboard server"
        text = f"{systems} x {unit}s" if systems > 1 else f"{'an' if per_system == 8 else 'a'} {unit}"
        text += f" ({spec.name} is sold only on {'- or '.join(str(size) for size in sizes)}-GPU boards)"
    else:
        kind = "workstation" if per_system <= WORKSTATION_MAX_CARDS else "server"
        cards = f"{per_system} card{'s' if per_system > 1 else ''}"
        text = f"{systems} {kind}s with {cards} each" if systems > 1 else f"a {kind} with {cards}"
    if systems * per_system > gpus:
        text += f"; {systems * per_system} GPUs bought for a run on {gpus}"
    return BoughtSystem(gpus_per_system=per_system, systems=systems, kind=kind, text=text)


def server_power(gpu_tdp_w: float, gpus: int, spec: GpuSpec | None = None) -> tuple[int, str]:
    """(watts the supplies must carry, arithmetic) for one server of `gpus` cards of `gpu_tdp_w`: the rule in
    the module's docstring, carried on SERVER_SUPPLY_W supplies, N + N redundant as servers ship; with the
    catalog's reference system for an 8-GPU server of `spec`, its stated maximum for comparison."""
    cards = gpu_tdp_w * gpus
    cpus = SERVER_CPU_TDP_W * SERVER_CPUS
    platform = PLATFORM_SHARE * cards
    load = cards + cpus + platform
    supplies = math.ceil(load / SERVER_SUPPLY_W)
    text = (f"server: GPUs {gpus} x {gpu_tdp_w:g} W + {SERVER_CPUS} CPUs x {SERVER_CPU_TDP_W:g} W + platform "
            f"(fans, switches, NICs, drives) {PLATFORM_SHARE:g} x {cards:g} W = {load:,.0f} W -> {supplies} x "
            f"{SERVER_SUPPLY_W:,} W supplies to carry it, {2 * supplies} fitted (N + N redundant)")
    if spec is not None and spec.reference_system and gpus == 8:
        text += (f"; {spec.reference_system} states {spec.reference_system_power_w:,.0f} W at most "
                 f"({spec.reference_system_source})")
    return supplies * SERVER_SUPPLY_W, text


def buy_note(spec: GpuSpec, system: BoughtSystem, gpus: int) -> str:
    """'to buy: N GPUs as sold (4- or 8-GPU boards)' when more GPUs are bought than the run uses, else ''."""
    if system.gpus <= gpus:
        return ""
    boards = f" ({'- or '.join(str(n) for n in spec.system_gpus)}-GPU boards)" if spec.sold_as_systems else ""
    return f"to buy: {system.gpus} GPUs as sold{boards}"
