"""Compare two sessions: per cell, the second's number over the first's, a verdict that accounts for the
spread of repeated runs, the same for samples per joule where both measured energy, and what changed
between them (image, kit, recipe, driver, CUDA, torch, device, clocks, power cap, node).

A single run says nothing about its spread: where either side of a cell ran once, its verdict says
so, and a regression gate on it needs the noise band the user accepts (`--noise`), given explicitly.

    inv compare previous latest --fail-on-regression 5     # CI of an image build: exit 1 on a regression
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprokit.collect import machines, results_folder
from reprokit.contract.bounded import Malformed
from reprokit.contract.errors import ReprokitError
from reprokit.contract.textsafe import NAME, markup, short
from reprokit.contract.textsafe import line as markup_free
from reprokit.judge.result_row import Row
from reprokit.judge.verdicts import not_a_rate

REGRESSED, IMPROVED, SAME, NOT_COMPARED = "regressed", "improved", "same", "not compared"
# What is compared between the two runs of a cell, in the order people look for it.
CHANGES = ("image_id", "kit_revision", "recipe_hash", "driver", "cuda", "torch", "transformers", "device_name",
           "machine")  # fmt: skip


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


def _range(row: Row) -> tuple[float, float]:
    world = row.world_size or 1
    low, high = row.measured_min, row.measured_max
    if low is None or high is None:
        value = row.measured_per_device or 0.0
        return value, value
    return low / world, high / world


def repeated(row: Row) -> bool:
    """Whether a row is the median of repeated runs (its min..max says how much a run varies)."""
    return (row.repeats or 0) > 1 and row.measured_min is not None


def judge(a: Row, b: Row, threshold: float, noise: float | None = None) -> tuple[float | None, str, str]:
    """(B/A per device, verdict, why). With repeated runs on both sides, a change counts only when the
    two ranges (min..max) do not overlap, and beyond that only when it exceeds the threshold. Where a
    side ran once, `noise` (the run-to-run spread the user accepts) is the band; without it the
    verdict is the threshold's, said to rest on an unknown spread."""
    for side, row in (("A", a), ("B", b)):
        problem = _no_figure(row)
        if problem:
            return None, NOT_COMPARED, f"{side}: {problem}"
    if (a.definition or "") != (b.definition or ""):
        return None, NOT_COMPARED, f"measured under different definitions ({a.definition} vs {b.definition})"
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
    (a_low, a_high), (b_low, b_high) = _range(a), _range(b)
    overlap = b_high >= a_low and b_low <= a_high and (a_low != a_high or b_low != b_high)
    if abs(ratio - 1) <= threshold:
        return ratio, SAME, f"within ±{threshold:.0%}"
    if overlap:
        return ratio, SAME, "within the spread of the repeated runs"
    return ratio, changed, ""


def _no_figure(row: Row) -> str | None:
    """Why a side's figure cannot be set beside the other's: none (and why: the row's reasons), or one
    that is not a rate (NaN, infinite, 0, below 0: a results.jsonl another kit wrote)."""
    value = row.measured_per_device
    if value is None:
        if row.status not in ("ok", "partial"):
            return f"no result ({row.status})"
        why = [r for r in (row.verdict_reasons or "").split("; ") if r.startswith("throughput ")]
        return "no figure" + (f" ({'; '.join(why)})" if why else "")
    problem = not_a_rate(value)
    return f"throughput {problem} ({value})" if problem else None


def judge_energy(a: Row, b: Row, threshold: float) -> tuple[float | None, str]:
    """(B/A samples per joule, verdict): compared only where both runs measured energy (a figure above 0)."""
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
) -> tuple[Path, Path, list[CellComparison]]:
    """Every cell of either session, matched by cell id (`latest` and `previous` among the sessions
    that can be read: those that cannot are added to `skipped`)."""
    left: list[Malformed] = []
    a_dir, b_dir = (
        results_folder.resolve_session(results, first, left),
        results_folder.resolve_session(results, second, left),
    )
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
        ratio, verdict, why = judge(a, b, threshold, noise)
        single = ratio is not None and not (repeated(a) and repeated(b))
        energy_ratio, energy_verdict = judge_energy(a, b, threshold)
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


def gate(
    found: list[CellComparison], limit: float, noise: float | None
) -> tuple[list[CellComparison], list[CellComparison]]:
    """(the cells that regressed by more than `limit` (a fraction), the cells the gate cannot judge),
    for --fail-on-regression. A cell it cannot judge (no figure on a side, a NaN, infinite, zero or
    negative one, a cell in one session only) fails the gate unless the user passes over such cells: a
    broken run must not pass a CI job as `not a regression`. A gate on a cell that ran once on a side
    needs the noise band (`noise`): refused in one line without it."""
    single = [x.cell_id for x in found if x.single]
    if single and noise is None:
        raise ReprokitError(
            f"--fail-on-regression on single runs needs --noise PCT (the run-to-run spread you accept on this "
            f"machine), or sessions run with --repeat 3: {', '.join(single)} ran once on a side"
        )
    worse = [x for x in found if x.verdict == REGRESSED and x.ratio is not None and 1 - x.ratio > limit]
    return worse, [x for x in found if x.verdict == NOT_COMPARED]


def unjudged_line(unjudged: list[CellComparison]) -> str:
    """The gate's one line for the cells it cannot judge."""
    return (
        f"--fail-on-regression cannot judge {len(unjudged)} cell(s): "
        + "; ".join(f"{markup_free(x.cell_id)} ({x.why})" for x in unjudged)
        + " (--skip-unjudged gates on the others)"
    )


def changes(a: Row, b: Row) -> dict[str, tuple[Any, Any]]:
    """What differs between the two runs: provenance first, then hardware (clocks, power cap, ...)."""
    # The machine, not the hostname: a container's is new each run (machines.py).
    pa, pb = {**a.provenance, "machine": machines.name(a)}, {**b.provenance, "machine": machines.name(b)}
    keys = [*CHANGES, *sorted(k for k in {*pa, *pb} if k.startswith("hw_"))]
    return {k: (pa.get(k), pb.get(k)) for k in keys if pa.get(k) != pb.get(k)}


def _side(session: Path, row: Row | None) -> dict[str, Any] | None:
    if row is None:
        return None
    world = row.world_size or 1
    low, high = (row.measured_min, row.measured_max) if repeated(row) else (None, None)
    return {
        "session": session.name,
        "measured_per_device": row.measured_per_device,
        "measured_min_per_device": None if low is None else low / world,
        "measured_max_per_device": None if high is None else high / world,
        "repeats": row.repeats,
        "samples_per_joule": row.samples_per_joule,
        "definition": row.definition,
    }


def to_json(first: Path, second: Path, found: list[CellComparison], threshold: float, noise: float | None,
            limit: float | None, worse: list[CellComparison],
            unjudged: list[CellComparison] | None = None) -> dict[str, Any]:  # fmt: skip
    """`compare --json` (reprokit/schemas/compare.schema.json): the table's content, and the gate's
    answer when one was asked for (`unjudged`: the cells it could not judge and did not pass over)."""
    everywhere = _common_changes(found)
    return {
        "a": first.name,
        "b": second.name,
        "threshold": threshold,
        "noise": noise,
        "cells": [
            {
                "cell_id": x.cell_id,
                "a": _side(first, x.a),
                "b": _side(second, x.b),
                "ratio": x.ratio,
                "verdict": x.verdict,
                "why": x.why,
                "single": x.single,
                "energy_ratio": x.energy_ratio,
                "energy_verdict": x.energy_verdict,
                "changed": {k: [old, new] for k, (old, new) in x.changed.items() if k not in everywhere},
            }
            for x in found
        ],
        "changed_everywhere": {k: [old, new] for k, (old, new) in everywhere.items()},
        "gate": None
        if limit is None
        else {
            "limit": limit,
            "regressed": [x.cell_id for x in worse],
            "unjudged": [{"cell_id": x.cell_id, "why": x.why} for x in unjudged or []],
            "passed": not worse and not unjudged,
        },
    }


def print_table(first: Path, second: Path, found: list[CellComparison]) -> None:
    from rich.console import Console
    from rich.table import Table

    styles = {REGRESSED: "red", IMPROVED: "green", SAME: "", NOT_COMPARED: "yellow"}
    view = Table(title=markup(f"A = {first.name}, B = {second.name} (per device)"))
    energy = any(x.energy_ratio is not None for x in found)
    for column in (
        "cell",
        "A",
        "B",
        "B/A",
        "verdict",
        *(["samples/J B/A"] if energy else []),
        "what changed",
    ):
        view.add_column(column, overflow="fold")
    everywhere = _common_changes(found)
    for x in found:
        a = _per_device(x.a)
        b = _per_device(x.b)
        ratio = "-" if x.ratio is None else f"{x.ratio:.3f}"
        verdict = x.verdict + (f" ({x.why})" if x.why else "")
        style = styles.get(x.verdict, "")
        own = "; ".join(_change(k, old, new) for k, (old, new) in x.changed.items() if k not in everywhere)
        per_joule = "-" if x.energy_ratio is None else f"{x.energy_ratio:.3f} {x.energy_verdict}"
        # Every word from the sessions' files is text: never rich markup (`[/]`), never a control character.
        verdict = markup(verdict)
        view.add_row(
            markup(x.cell_id, NAME), a, b, ratio, f"[{style}]{verdict}[/]" if style else verdict,
            *([per_joule] if energy else []), markup(own or "-"),
        )  # fmt: skip
    console = Console(width=200)
    console.print(view)
    if everywhere:
        console.print(
            markup(
                "Changed for every cell: "
                + "; ".join(_change(k, old, new) for k, (old, new) in everywhere.items())
            )
        )


def _change(key: str, old: Any, new: Any) -> str:
    """`image_id: sha256:... -> sha256:...`: each name within its bound (--json has them whole; rich
    folding a word of 500,000 characters into a column took minutes)."""
    return f"{short(key, NAME)}: {short(old, NAME)} -> {short(new, NAME)}"


def _per_device(row: Row | None) -> str:
    if row is None or row.measured_per_device is None:
        return "-"
    low, high = _range(row)
    spread = f" [{low:,.2f}..{high:,.2f}]" if low != high else ""
    return f"{row.measured_per_device:,.2f}{spread}"


def _common_changes(found: list[CellComparison]) -> dict[str, tuple[Any, Any]]:
    compared = [x for x in found if x.a is not None and x.b is not None]
    if not compared:
        return {}
    first = compared[0].changed
    return {k: v for k, v in first.items() if all(x.changed.get(k) == v for x in compared)}
