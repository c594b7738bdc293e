"""A row's numbers and verdicts as the report, the terminal table and the benchmarks write them: `-`
for nothing, thousands separated, ratios as `1.25x`, sizes in GiB."""

from __future__ import annotations

from typing import Any

from reprokit.results import verdicts
from reprokit.results.row import Row


def number(value: Any, digits: int = 2) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def gib(value: Any) -> str:
    return f"{value / 2**30:.2f} GiB" if isinstance(value, int | float) else "-"


def seconds(value: Any) -> str:
    return f"{value:,.1f} s" if isinstance(value, int | float) else "-"


def step_times(r: Row) -> str:
    """A cell's step-time percentiles in milliseconds (its measured steps, end to end)."""
    found = (r.step_time_p50_s, r.step_time_p90_s, r.step_time_p99_s)
    if not all(isinstance(value, int | float) for value in found):
        return "-"
    return " / ".join(f"{value * 1e3:,.1f}" for value in found) + " ms"


def percent(value: Any) -> str:
    return f"{value:.1%}" if isinstance(value, int | float) else "-"


def measured(r: Row) -> str:
    """The measured figure with its unit, and for repeated runs the median's range."""
    if r.measured is None:
        return "-"
    text = f"{number(r.measured)} {r.unit or ''}".strip()
    if (r.repeats or 0) > 1:
        text += f" (median of {r.repeats}, {number(r.measured_min)} to {number(r.measured_max)})"
    return text


def published(r: Row) -> str:
    """The published figure per device, and the whole-node figure it comes from."""
    if r.reference is None:
        return "-"
    return f"{number(r.reference_per_device)} ({number(r.reference)} on {r.reference_devices} {r.device})"


def speedup(r: Row) -> str:
    """`measured vs published` speedup over the baseline; `-` when the row has neither."""
    if r.measured_speedup is None and r.published_speedup is None:
        return "-"
    return f"{ratio(r.measured_speedup)} vs {ratio(r.published_speedup)}"


def verdict(r: Row) -> str:
    """`not comparable (smoke scale)`, `reproduced; quality only: random weights`."""
    return verdicts.worded(r.verdict, r.verdict_reasons, r.quality_departures)


def speedup_verdict(r: Row) -> str:
    return verdicts.worded(r.speedup_verdict, r.speedup_verdict_reasons)
