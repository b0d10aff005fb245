"""The section of a plan's page that `gpufeed plan --check` adds, for image and language models alike: the planned
peak against the one measured here, and the check's own lines (plan/check.py, plan/language/check.py)."""

from __future__ import annotations

from gpufeed.report.html import Page
from gpufeed.units import NA, size_text


def check_section(page: Page, check: dict) -> None:
    page.heading(f"Check against a measured step on {check['device']}")
    if check.get("predicted_peak_bytes") is not None and check.get("measured_peak_bytes") is not None:
        page.table(["predicted peak", "measured peak", "error of the prediction"],
                   [(size_text(check["predicted_peak_bytes"]), size_text(check["measured_peak_bytes"]),
                     NA if check.get("error_fraction") is None else f"{check['error_fraction']:+.1%}")],
                   caption="Peak device memory as the method below counts it")
    page.bullets(check.get("lines") or [])
    page.paragraph(f"Method: {check['method']}")
