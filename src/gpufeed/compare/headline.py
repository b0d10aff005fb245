"""The comparison's headline: the change per sample, whether it is real, then the part of the step that moved
the most (and the part inside it that moved the most), then the parts that did not move:

    NEW is 23% slower per sample: data wait +12.1 ms a step (getitem +11.8 ms a batch); forward, backward and
    optimizer unchanged

A change within the noise reads "no change per sample (NEW's time per sample +1.2%, within the noise: -4.0% to
+6.1%)"; one whose
significance could not be computed says so. Across two machines the headline starts by saying so."""

from __future__ import annotations

from gpufeed.compare.model import Figure, per_sample_words

CHILDREN = {"data_wait": ("getitem", "collate", "handover", "pin")}
SHOWN_PARTS = 2  # parts named as moved, the largest change first


def _signed(value: float, unit: str) -> str:
    return f"{value:+.1f} {unit}" if abs(value) >= 0.05 else f"{value:+.3f} {unit}"


def per_sample_phrase(slower: float | None, interval: tuple[float, float] | None, real: bool | None,
                      why_not: str) -> str:
    if slower is None:
        return "the time per sample was not compared"
    if real is None:
        return f"{per_sample_words(slower)} (whether that is real could not be computed" + \
            (f": {why_not})" if why_not else ")")
    if not real:
        spread = f": {interval[0]:+.1%} to {interval[1]:+.1%}" if interval else ""
        return f"no change per sample (NEW's time per sample {slower:+.1%}, within the noise{spread})"
    return per_sample_words(slower)


def _words(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def parts_phrase(figures: list[Figure]) -> str:
    """The parts that moved (largest first, each with the part inside it that moved most the same way: with loader
    workers, getitem and collate run beside the loop, and may slow while the loop's wait shrinks) and those that
    did not."""
    parts = [f for f in figures if f.level == 0 and f.unit == "ms a step" and f.key not in ("step",)
             and f.difference is not None]
    moved = sorted((f for f in parts if f.real), key=lambda f: -abs(f.difference))
    still = [f.name for f in parts if f.real is False]
    phrases = []
    for part in moved[:SHOWN_PARTS]:
        text = f"{part.name} {_signed(part.difference, part.unit)}"
        inside = [f for f in figures if f.key in CHILDREN.get(part.key, ()) and f.real and f.difference is not None
                  and (f.difference > 0) == (part.difference > 0)]  # a part inside that moved the same way
        if inside:
            top = max(inside, key=lambda f: abs(f.difference))
            text += f" ({top.name} {_signed(top.difference, top.unit)})"
        phrases.append(text)
    if not phrases and still:
        return "no part of the step changed beyond the noise"
    if still:
        phrases.append(f"{_words(still)} unchanged")
    return "; ".join(phrases)


def headline(per_sample: str, parts: str, across: str | None = None, extra: str | None = None) -> str:
    line = per_sample + (f": {parts}" if parts else "")
    if extra:
        line += f"; {extra}"
    return f"across two machines ({across}): {line}" if across else line
