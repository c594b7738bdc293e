"""Ratios between the rows of one session: each variant's speedup over its group's baseline (beside
the published one), a variant beyond the publication over the published variant it goes beyond, and
a multi-node cell's scaling efficiency over its single-node twin.

Each is returned as a value per cell id; collect puts it into the rows (`dataclasses.replace`). Two
runs of a session are always compared per device and under one definition (`per_device_ratio`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reprokit.judge.result_row import Row
from reprokit.judge.verdicts import (
    BEYOND,
    NOT_COMPARABLE,
    STEADY,
    blocking,
    length_reasons,
    per_device,
    verdict,
)


@dataclass(frozen=True)
class Speedup:
    """A row's speedup columns (the fields of Row of the same names)."""

    measured_speedup: float | None = None
    published_speedup: float | None = None
    speedup_reference_device: str | None = None
    speedup_definition: str | None = None
    speedup_verdict: str | None = None
    speedup_verdict_reasons: str | None = None


def group(row: Row) -> tuple[str | None, str]:
    """The variants a speedup compares: a recipe's group (a post's first version has its own)."""
    return row.recipe, row.group or "main"


def baselines(rows: list[Row]) -> dict[tuple[str | None, str], Row]:
    """Each group's baseline among `rows`."""
    return {group(r): r for r in rows if r.baseline}


def per_device_ratio(mine: Row, base: Row | None, definition: str) -> float | None:
    """`mine`'s figure over `base`'s, per device, both under `definition`."""
    if base is None:
        return None
    numerator, denominator = mine.measurements.get(definition), base.measurements.get(definition)
    if numerator is None or not denominator or not mine.world_size or not base.world_size:
        return None
    return (numerator / mine.world_size) / (denominator / base.world_size)


def _absolute(references: list[dict[str, Any]], device: str) -> dict[str, Any] | None:
    return next((r for r in references if r.get("value") is not None and r.get("device") == device), None)


def published_speedup(row: Row, base: Row) -> tuple[float | None, str | None, str]:
    """(published speedup, the device whose figures give it, their definition): an explicit ratio,
    else the ratio of the two published figures on the device the row ran on, or, where the
    publication has none for it, on the publication's first device."""
    explicit = next((x for x in row.references if x.get("ratio") is not None), None)
    if explicit is not None:
        return explicit["ratio"], None, explicit.get("definition") or STEADY
    devices = [x["device"] for x in base.all_references() if x.get("value") is not None]
    for device in ([row.device] if row.device in devices else []) + devices:
        mine, theirs = _absolute(row.all_references(), device), _absolute(base.all_references(), device)
        if mine and theirs:
            return per_device(mine) / per_device(theirs), device, mine.get("definition") or STEADY
    return None, None, STEADY


def both_sides(row: Row, other: Row, definition: str) -> list[str]:
    """Why a speedup of `row` over `other` is no verdict: a throughput departure of either run (the
    other's followed by `(in the <variant> run)`, after its details, so that its name, the words before
    them, reads as the same departure's), or a run too short for a length-dependent definition. A
    speedup is a verdict of two runs, and each must have measured what it claims."""
    reasons = [*blocking(row.departures), *length_reasons(row.max_steps, definition)]
    theirs = [*blocking(other.departures), *length_reasons(other.max_steps, definition)]
    named = [r if r in reasons else f"{r} (in the {other.variant} run)" for r in theirs]
    return list(dict.fromkeys([*reasons, *named]))


def over_baseline(row: Row, base: Row) -> Speedup:
    """A row's throughput over its group's baseline measured in the same session, beside the published
    speedup, under the published figures' definition; judged only when both runs did what the
    publication did."""
    published, device, definition = published_speedup(row, base)
    measured = per_device_ratio(row, base, definition)
    if measured is None or published is None:
        return Speedup(measured, published, device, definition)
    reasons = both_sides(row, base, definition)
    tolerance = row.tolerance if row.tolerance is not None else 0.10
    outcome = verdict(measured / published, tolerance, reasons)
    why = "; ".join(reasons) if outcome == NOT_COMPARABLE else None
    return Speedup(measured, published, device, definition, outcome, why)


def over_published(row: Row, published: Row | None) -> Speedup:
    """A variant beyond the publication over the published variant it goes beyond, both measured in
    this session at the same scale and node count, under the published variant's definition: what
    today's software buys on the old recipe. Read as that (`beyond the publication`) only when both
    runs are free of throughput departures (a shared machine, synthetic data, the smoke scale), else
    `not comparable` and why: a speedup over a disturbed baseline reads as a gain it is not."""
    definition = (published.definition if published else None) or STEADY
    measured = per_device_ratio(row, published, definition)
    if measured is None or published is None:
        return Speedup(measured, None, None, definition)
    reasons = both_sides(row, published, definition)
    if reasons:
        return Speedup(measured, None, None, definition, NOT_COMPARABLE, "; ".join(reasons))
    return Speedup(measured, None, None, definition, BEYOND)


def speedups(rows: list[Row]) -> dict[str, Speedup]:
    """The speedup of each row that has one, by cell id: the baseline's is 1.0 (when it measured)."""
    bases = baselines(rows)
    published = {(r.recipe, r.variant, r.scale, r.nodes): r for r in rows if not r.beyond}
    found: dict[str, Speedup] = {}
    for r in rows:
        base = bases.get(group(r))
        if r.beyond:
            found[r.cell_id] = over_published(r, published.get((r.recipe, r.beyond, r.scale, r.nodes)))
        elif r is base and r.measured_per_device is not None:
            found[r.cell_id] = Speedup(measured_speedup=1.0, published_speedup=1.0)
        elif base is not None and r is not base:
            found[r.cell_id] = over_baseline(r, base)
    return found


def scaling_efficiency(rows: list[Row]) -> dict[str, float]:
    """Each multi-node row's per-device throughput over the single-node row of the same recipe,
    variant, scale and accelerator, by cell id: 1.0 is perfect scaling (N nodes, N times the
    samples/s; per device, since the per-device batch is the same). The VOLO post's 2100 img/s on
    five DGX A100 against 500 on one is 0.84."""
    single = {
        (r.recipe, r.variant, r.scale, r.accelerator): r
        for r in rows
        if r.nodes == 1 and r.measured_per_device
    }
    found = {}
    for r in rows:
        base = single.get((r.recipe, r.variant, r.scale, r.accelerator))
        if base is not None and (r.nodes or 1) > 1 and r.measured_per_device is not None:
            found[r.cell_id] = r.measured_per_device / base.measured_per_device
    return found
