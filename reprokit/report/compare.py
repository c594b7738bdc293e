"""Compare two sessions: per cell, the second's number over the first's, a verdict that accounts for the
spread of repeated runs, the same for samples per joule where both measured energy, and what changed
between them (image, kit, recipe, driver, CUDA, torch, device, clocks, power cap, node).

A single run says nothing about its spread: where either side of a cell ran once, its verdict says
so, and a regression gate on it needs the noise band the user accepts (`--noise`), given explicitly.
Every number a verdict reads (the figure, the min and max of repeated runs, their spread and count)
is checked as the figure is: a row that fails is `not compared`, naming the field and its value; so
is a side whose run was disturbed (a stall, a shared machine) unless asked to judge it anyway.

    inv compare previous latest --fail-on-regression 5     # CI of an image build: exit 1 on a regression

Which numbers of a row can be trusted: trust.py; the gate: gate.py; the table and --json: compare_view.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprokit.collect import machines, results_folder
from reprokit.contract.bounded import Malformed
from reprokit.judge.result_row import Row
from reprokit.judge.verdicts import not_a_rate
from reprokit.report.trust import departed, per_device_range, repeated, untrusted

REGRESSED, IMPROVED, SAME, NOT_COMPARED = "regressed", "improved", "same", "not compared"
# What is compared between the two runs of a cell, in the order people look for it.
CHANGES = ("image_id", "kit_revision", "recipe_hash", "driver", "cuda", "torch", "transformers", "device_name",
           "machine")  # fmt: skip
# The flag that judges a side whose run was disturbed (cli/result_tasks.py's compare).
JUDGE_DEPARTED = "--judge-departed"


@dataclass
class CellComparison:
    cell_id: str
    a: Row | None
    b: Row | None
    ratio: float | None
    verdict: str
    why: str = ""
    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    # Samples per joule, B over A, and its verdict (the same threshold; energy has no spread to read).
    energy_ratio: float | None = None
    energy_verdict: str = NOT_COMPARED
    # Either side ran once: the spread is unknown, and the verdict rests on the noise band given (if any).
    single: bool = False


SINGLE = "one run on a side: its spread is unknown"


def refusal(a: Row, b: Row, judge_departed: bool = False) -> str | None:
    """Why nothing of a cell (throughput, energy) is set side by side: a side whose numbers cannot be
    trusted, or whose run was disturbed (unless `judge_departed`)."""
    for side, row in (("A", a), ("B", b)):
        problem = untrusted(row)
        if problem:
            return f"{side}: {problem}"
    for side, row in (("A", a), ("B", b)):
        found = departed(row)
        if found and not judge_departed:
            return f"{side}: {'; '.join(found)} ({JUDGE_DEPARTED} judges it)"
    return None


def judge(
    a: Row, b: Row, threshold: float, noise: float | None = None, judge_departed: bool = False
) -> tuple[float | None, str, str]:
    """(B/A per device, verdict, why). With repeated runs on both sides, a change counts only when the
    two ranges (min..max) do not overlap, and beyond that only when it exceeds the threshold. Where a
    side ran once, `noise` (the run-to-run spread the user accepts) is the band; without it the
    verdict is the threshold's, said to rest on an unknown spread. A side without a figure, whose
    numbers cannot be trusted, or whose run was disturbed (unless `judge_departed`) is not compared."""
    for side, row in (("A", a), ("B", b)):
        problem = _no_figure(row)
        if problem:
            return None, NOT_COMPARED, f"{side}: {problem}"
    refused = refusal(a, b, judge_departed)
    if refused:
        return None, NOT_COMPARED, refused
    if (a.definition or "") != (b.definition or ""):
        return None, NOT_COMPARED, f"measured under different definitions ({a.definition} vs {b.definition})"
    ratio, verdict, why = _judged(a, b, threshold, noise)
    # Judged as asked: the verdict says what it rests on.
    asked = "; ".join(f"{side} judged though {'; '.join(departed(row))}" for side, row in (("A", a), ("B", b))
                      if departed(row))  # fmt: skip
    return ratio, verdict, "; ".join(x for x in (why, asked) if x)


def _judged(a: Row, b: Row, threshold: float, noise: float | None) -> tuple[float, str, str]:
    ratio = b.measured_per_device / a.measured_per_device
    changed = IMPROVED if ratio > 1 else REGRESSED
    if not (repeated(a) and repeated(b)):
        if noise is not None:
            band = max(noise, threshold)
            if abs(ratio - 1) <= band:
                return ratio, SAME, f"within the noise band ±{band:.0%} given for single runs"
            return ratio, changed, f"beyond the noise band ±{band:.0%} given for single runs"
        if abs(ratio - 1) <= threshold:
            return ratio, SAME, f"within ±{threshold:.0%}; {SINGLE}"
        return ratio, changed, SINGLE
    (a_low, a_high), (b_low, b_high) = per_device_range(a), per_device_range(b)
    overlap = b_high >= a_low and b_low <= a_high and (a_low != a_high or b_low != b_high)
    if abs(ratio - 1) <= threshold:
        return ratio, SAME, f"within ±{threshold:.0%}"
    if overlap:
        return ratio, SAME, "within the spread of the repeated runs"
    return ratio, changed, ""


def _no_figure(row: Row) -> str | None:
    """Why a side has no figure to set beside the other's (and why: the row's reasons)."""
    if row.measured_per_device is None:
        if row.status not in ("ok", "partial"):
            return f"no result ({row.status})"
        why = [r for r in (row.verdict_reasons or "").split("; ") if r.startswith("throughput ")]
        return "no figure" + (f" ({'; '.join(why)})" if why else "")
    return None


def judge_energy(a: Row, b: Row, threshold: float) -> tuple[float | None, str]:
    """(B/A samples per joule, verdict): compared only where both runs measured energy (a figure above 0,
    and within not_a_rate's bound: a billion samples a joule is a nanojoule a sample, no training step)."""
    a_value, b_value = a.samples_per_joule, b.samples_per_joule
    if a_value is None or b_value is None or not_a_rate(a_value) or not_a_rate(b_value):
        return None, NOT_COMPARED
    ratio = b_value / a_value
    if abs(ratio - 1) <= threshold:
        return ratio, SAME
    return ratio, IMPROVED if ratio > 1 else REGRESSED


def compare(
    results: Path,
    first: str,
    second: str,
    threshold: float = 0.05,
    noise: float | None = None,
    skipped: list[Malformed] | None = None,
    judge_departed: bool = False,
) -> tuple[Path, Path, list[CellComparison]]:
    """Every cell of either session, matched by cell id (`latest` and `previous` among the sessions
    that can be read: those that cannot are added to `skipped`)."""
    left: list[Malformed] = []
    try:
        a_dir, b_dir = (
            results_folder.resolve_session(results, first, left),
            results_folder.resolve_session(results, second, left),
        )
    finally:  # said when no session is left to compare too
        if skipped is not None:
            skipped += list({str(x): x for x in left}.values())  # latest and previous list the same ones
    a_rows = {r.cell_id: r for r in results_folder.rows_of(a_dir, a_dir.parent)}
    b_rows = {r.cell_id: r for r in results_folder.rows_of(b_dir, b_dir.parent)}
    found = []
    for cell_id in dict.fromkeys([*a_rows, *b_rows]):
        a, b = a_rows.get(cell_id), b_rows.get(cell_id)
        if a is None or b is None:
            found.append(
                CellComparison(cell_id, a, b, None, NOT_COMPARED, "only in " + ("B" if a is None else "A"))
            )
            continue
        ratio, verdict, why = judge(a, b, threshold, noise, judge_departed)
        single = ratio is not None and not (repeated(a) and repeated(b))
        # A side not trusted, or disturbed, is trusted for nothing: its energy is the same run's.
        energy_ratio, energy_verdict = (
            (None, NOT_COMPARED) if refusal(a, b, judge_departed) else judge_energy(a, b, threshold)
        )
        found.append(
            CellComparison(
                cell_id,
                a,
                b,
                ratio,
                verdict,
                why,
                changes(a, b),
                energy_ratio=energy_ratio,
                energy_verdict=energy_verdict,
                single=single,
            )  # fmt: skip
        )
    return a_dir, b_dir, found


def changes(a: Row, b: Row) -> dict[str, tuple[Any, Any]]:
    """What differs between the two runs: provenance first, then hardware (clocks, power cap, ...)."""
    # The machine, not the hostname: a container's is new each run (machines.py).
    pa, pb = {**a.provenance, "machine": machines.name(a)}, {**b.provenance, "machine": machines.name(b)}
    keys = [*CHANGES, *sorted(k for k in {*pa, *pb} if k.startswith("hw_"))]
    return {k: (pa.get(k), pb.get(k)) for k in keys if pa.get(k) != pb.get(k)}
