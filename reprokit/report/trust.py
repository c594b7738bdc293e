"""Whether a result row's numbers can be trusted for a verdict: a figure, the min and max of its
repeated runs, their spread and count, each checked as the figure is (a hand edit or another tool's
row must not widen a range until any change reads `same`), and the disturbances of its run. compare
judges only what passes; history draws a spread only where it does."""

from __future__ import annotations

import math

from reprokit.contract.records import THROUGHPUT
from reprokit.judge.repeats import median
from reprokit.judge.result_row import Row
from reprokit.judge.verdicts import disturbances, not_a_rate

# How far two of a row's numbers that are one computation apart (a median and its runs, a figure per
# device and per node) may differ: float rounding, nothing a hand edit would stay within.
ROUNDING = 1e-9


def per_device_range(row: Row) -> tuple[float, float]:
    world = row.world_size or 1
    low, high = row.measured_min, row.measured_max
    if low is None or high is None:
        value = row.measured_per_device or 0.0
        return value, value
    return low / world, high / world


def repeated(row: Row) -> bool:
    """Whether a row is the median of repeated runs (its min..max says how much a run varies)."""
    return (row.repeats or 0) > 1 and row.measured_min is not None


def _near(value: float, expected: float) -> bool:
    return math.isclose(value, expected, rel_tol=ROUNDING)


def untrusted(row: Row) -> str | None:
    """Why a number a verdict would read from `row` cannot be used, naming the field and its value;
    None when each holds. A figure, min or max that is not a rate (not_a_rate: NaN, infinite, 0 or
    below, beyond any device's speed), a min above the figure or a max below it, a spread that is not
    (max - min) / median, a repeat count that is not the runs the row records, a device count below 1:
    a hand edit or another tool's row must not widen a range until any change reads `same`. A row
    without a figure is _no_figure's to say."""
    world, figure = row.world_size, row.measured_per_device
    if world is not None and world < 1:
        return f"world_size {world} is not a device count"
    world = world or 1
    if figure is None:
        return None
    problem = not_a_rate(figure)
    if problem:
        return f"throughput {problem} ({figure!r})"
    if row.measured is not None and not _near(row.measured, figure * world):
        return f"measured_per_device {figure!r} is not measured {row.measured!r} over {world} device(s)"
    low, high = row.measured_min, row.measured_max
    for name, value in (("measured_min", low), ("measured_max", high)):
        problem = not_a_rate(value, world)
        if problem:
            return f"{name} {value!r} is {problem}"
    if (low is None) != (high is None):
        return f"measured_min {low!r} and measured_max {high!r}: a range has both ends"
    median_run = figure * world
    if low is not None and high is not None:
        if low > median_run and not _near(low, median_run):
            return f"measured_min {low!r} is above the figure ({median_run:.6g})"
        if high < median_run and not _near(high, median_run):
            return f"measured_max {high!r} is below the figure ({median_run:.6g})"
    if row.spread is not None:
        expected = None if low is None or high is None else (high - low) / median_run
        if (
            not math.isfinite(row.spread)
            or row.spread < 0
            or (expected is not None and not _near(row.spread, expected))
        ):
            return f"spread {row.spread!r} is not (measured_max - measured_min) / median" + (
                f" ({expected:.4g})" if expected is not None else " (no range)"
            )
    if row.repeats is not None and row.repeats < 0:
        return f"repeats {row.repeats} is not a count of runs"
    return _runs_disagree(row) if repeated(row) else None


def _runs_disagree(row: Row) -> str | None:
    """Where a repeated row's count, median, min or max is not what its recorded runs say."""
    ran = []
    for number, run in enumerate(row.repetitions, 1):
        value = run.get("measured")
        if run.get("status") != "ok" or value is None:
            continue
        problem = not_a_rate(value, row.world_size or 1)
        if problem:
            return f"repetitions: run {number}'s measured {value!r} is {problem}"
        ran.append(value)
    if len(ran) != row.repeats:
        return f"repeats {row.repeats}, but the row records {len(ran)} run(s) that measured"
    checks = (("measured_min", row.measured_min, min(ran), "the slowest run's"),
              ("measured_max", row.measured_max, max(ran), "the fastest run's"),
              ("measured_per_device", row.measured_per_device * (row.world_size or 1), median(ran),
               "the runs' median"))  # fmt: skip
    for name, value, expected, what in checks:
        if value is not None and not _near(value, expected):
            return f"{name} {value!r} is not {what} ({expected:.6g})"
    return None


def departed(row: Row) -> list[str]:
    """The disturbances of a side's run (a stall, a shared machine: verdicts.DISTURBANCES): its own
    throughput departures, and a repeated row's reasons (any of its runs')."""
    reasons = [d.reason for d in row.departures if d.kind == THROUGHPUT]
    return disturbances([*reasons, *(row.verdict_reasons or "").split("; ")])
