"""sync_stall: the host waits on the device inside the step (`.item()`, `.cpu()`, a print of a tensor,
`torch.cuda.synchronize`).

Found when the host's time in those waits is at least INPUT_SHARE_MEDIUM of the step, or on a GPU when every step
waits at least once. A wait on a busy device costs only the bubble it leaves, so the share is at most the
device's idle share. --try (CUDA): "async_item" (trials/async_item.py), each `.item()` served one step stale without the
wait.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufeed.doctor.findings.experiments import AsyncItem, Declared
from gpufeed.doctor.findings.grading import (
    INPUT_SHARE_MEDIUM,
    OWN_LEVEL,
    OWN_LEVEL_SOURCE,
    confidence,
    new_finding,
    severity,
)
from gpufeed.doctor.findings.kind import Judged, Kind
from gpufeed.doctor.findings.report import Finding
from gpufeed.doctor.notes import Notes

if TYPE_CHECKING:
    from gpufeed.doctor.observation import Observation


class SyncStall(Kind):
    NAME = "sync_stall"
    MEANING = "the host waits on the device inside the step"
    PART, PER_STEP = "sync", "sync_s"  # shares.py: the part of the step its cause lives in
    RECOMMEND_AT, RECOMMEND_SOURCE = OWN_LEVEL, OWN_LEVEL_SOURCE
    FIGURES = ("sync_share", "syncs_per_step", "mean_sync_ms")

    def detect(self, seen: Observation, notes: Notes, judged: Judged) -> Finding | None:
        totals = seen.totals
        sync_share = totals.share(totals.sync_s)
        per_step = totals.sync_count / totals.steps
        if sync_share < INPUT_SHARE_MEDIUM and not (seen.on_gpu and per_step >= 1):
            return None
        busy = seen.device_busy()
        # A wait on a busy device costs only the bubble it leaves: at most the device's idle share.
        share = min(sync_share, 1.0 - busy) if seen.on_gpu and busy is not None else sync_share
        evidence = {"sync_share": sync_share, "syncs_per_step": per_step,
                    "mean_sync_ms": 1000.0 * totals.sync_s / totals.steps, "device_busy": busy}
        return new_finding(self.NAME, severity(share), share, evidence, fix(seen.device_type),
                           confidence(seen.count(lambda r: r.sync_count > 0)))

    def experiments(self, finding: Finding, cuda: bool) -> Declared:
        if not cuda:
            return [], "not tried: on the CPU, .item() waits for no device, so there is no wait to defer"
        return [AsyncItem()], None


def fix(device_type: str) -> tuple[str, str]:
    fix = ("The host waits for the device inside the step (.item(), .cpu(), print of a tensor, synchronize), so "
           "the device runs dry while the host catches up. Accumulate the loss on the device and read it every N "
           "steps.")
    if device_type == "cuda":
        fix += (" To log every step, copy the value with non_blocking=True into pinned memory and print the "
                "previous step's copy, which has landed by then (what `gpufeed doctor --try` measures).")
    snippet = (f"running_loss = torch.zeros((), device=\"{device_type}\")\n"
               f"for step, (images, labels) in enumerate(loader):\n"
               f"    loss = criterion(model(images), labels)\n"
               f"    optimizer.zero_grad(set_to_none=True)\n"
               f"    loss.backward()\n"
               f"    optimizer.step()\n"
               f"    running_loss += loss.detach()  # stays on the device: no wait\n"
               f"    if (step + 1) % 100 == 0:\n"
               f"        print(f\"loss {{running_loss.item() / 100:.4f}}\")  # one wait per 100 steps\n"
               f"        running_loss.zero_()")
    if device_type != "cuda":
        return fix, snippet
    snippet += ("\n\n# or, a value every step, one step late:\n"
                "host_loss = torch.zeros((), pin_memory=True)\n"
                "landed = torch.cuda.Event()\n"
                "for step, (images, labels) in enumerate(loader):\n"
                "    ...  # the step as above\n"
                "    if step > 0:\n"
                "        landed.synchronize()  # the previous step's copy: the device goes on with this step\n"
                "        print(f\"step {step - 1}: loss {host_loss.item():.4f}\")\n"
                "    host_loss.copy_(loss.detach(), non_blocking=True)  # starts the copy, does not wait\n"
                "    landed.record()")
    return fix, snippet
