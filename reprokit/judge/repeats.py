"""Repetitions of a cell (--repeat N): the runs of one series become one row, with the median of the
runs that measured, their min, max and spread, and the median's verdict.

`summary` returns what the series' row holds other than the run it is made from (`kept`); collect
makes the row with `dataclasses.replace`.
"""

from __future__ import annotations

from typing import Any

from reprokit.judge import verdicts
from reprokit.judge.result_row import Row, measured_columns

# What results.jsonl keeps of each run of a series.
RUN_FIELDS = ("cell_id", "status", "measured", "measured_per_device", "error")


def series(table: list[Row]) -> list[list[Row]]:
    """The rows by series (a cell's repetitions share its series id), in the order they come. A row
    kept from the last collect (`kept`) is a series' row already: it is a series of its own, never
    joined with runs read now."""
    found: dict[tuple[bool, str | None], list[Row]] = {}
    for r in table:
        found.setdefault((r.kept is not None, r.series_id or r.cell_id), []).append(r)
    return list(found.values())


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _median_or_none(values: list[Any]) -> float | None:
    found = [v for v in values if v is not None]
    return median(found) if found else None


def _done(runs: list[Row]) -> list[Row]:
    return [r for r in runs if r.status == "ok" and r.measured is not None]


def kept(runs: list[Row]) -> Row:
    """The run whose fields the series' row keeps: the first that measured, else the first."""
    done = _done(runs)
    return done[0] if done else runs[0]


def summary(runs: list[Row]) -> dict[str, Any]:
    """The series' row's fields other than its kept run's: how many runs measured, and for several
    runs, the series' id, each run, the status of all, and the figures of the runs that measured."""
    if len(runs) == 1:
        return {"repeats": 1 if runs[0].status == "ok" else 0}
    done, first = _done(runs), kept(runs)
    found: dict[str, Any] = {
        "cell_id": runs[0].series_id or runs[0].cell_id,
        "run_dir": None,
        "repetitions": [{k: getattr(r, k) for k in RUN_FIELDS} for r in runs],
        "repeats": len(done),
        "status": "ok" if len(done) == len(runs) else ("partial" if done else first.status),
    }
    if done:
        found.update(figures(first, done))
    return found


def figures(first: Row, done: list[Row]) -> dict[str, Any]:
    """The median of the runs that measured, per device, their range and spread, the median under
    every definition and of samples per joule, and the verdict of the median."""
    values = [r.measured for r in done if r.measured is not None]
    middle = median(values)
    per_device = middle / (first.world_size or 1)
    measurements = {
        name: _median_or_none([r.measurements.get(name) for r in done]) for name in first.measurements
    }
    reasons = list(dict.fromkeys(x for r in done for x in (r.verdict_reasons or "").split("; ") if x))
    tolerance = first.tolerance if first.tolerance is not None else 0.10
    ratio, outcome, why = verdicts.judge_value(
        per_device, first.reference_per_device, tolerance, reasons, first.beyond
    )
    return {
        "measured": middle,
        "measured_per_device": per_device,
        "measured_min": min(values),
        "measured_max": max(values),
        "spread": (max(values) - min(values)) / middle if middle else None,
        **measured_columns(measurements),
        "measurements": measurements,
        "samples_per_joule": _median_or_none([r.samples_per_joule for r in done]),
        "ratio_per_device": ratio,
        "verdict": outcome,
        "verdict_reasons": "; ".join(why) or None,
    }
