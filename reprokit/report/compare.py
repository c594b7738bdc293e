"""Compare two sessions: per cell, the second's number over the first's, a verdict that accounts for the
spread of repeated runs, the same for samples per joule where both measured energy, and what changed
between them (image, kit, recipe, driver, CUDA, torch, device, clocks, power cap, node).

A single run says nothing about its spread: where either side of a cell ran once, its verdict says
so, and a regression gate on it needs the noise band the user accepts (`--noise`), given explicitly.
Every number a verdict reads (the figure, the min and max of repeated runs, their spread and count)
is checked as the figure is: a row that fails is `not compared`, naming the field and its value; so
is a side whose run was disturbed (a stall, a shared machine) unless asked to judge it anyway.

    inv compare previous latest --fail-on-regression 5     # CI of an image build: exit 1 on a regression
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprokit.collect import machines, results_folder
from reprokit.contract.bounded import Malformed
from reprokit.contract.errors import ReprokitError
from reprokit.contract.records import THROUGHPUT
from reprokit.contract.textsafe import NAME, markup, short
from reprokit.contract.textsafe import line as markup_free
from reprokit.judge.repeats import median
from reprokit.judge.result_row import Row
from reprokit.judge.verdicts import disturbances, not_a_rate

REGRESSED, IMPROVED, SAME, NOT_COMPARED = "regressed", "improved", "same", "not compared"
# What is compared between the two runs of a cell, in the order people look for it.
CHANGES = ("image_id", "kit_revision", "recipe_hash", "driver", "cuda", "torch", "transformers", "device_name",
           "machine")  # fmt: skip
# How far two of a row's numbers that are one computation apart (a median and its runs, a figure per
# device and per node) may differ: float rounding, nothing a hand edit would stay within.
ROUNDING = 1e-9
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
    (a_low, a_high), (b_low, b_high) = _range(a), _range(b)
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


@dataclass
class Gate:
    """--fail-on-regression's answer: the cells that regressed beyond `limit` (a fraction), those it
    cannot judge and that fail it, those passed over (--skip-unjudged), and how many it judged."""

    limit: float
    regressed: list[CellComparison]
    unjudged: list[CellComparison]
    passed_over: list[CellComparison]
    judged: int
    cells: int

    @property
    def passed(self) -> bool:
        # A gate that judged nothing has said nothing: it does not pass.
        return not self.regressed and not self.unjudged and self.judged > 0

    def said(self) -> str:
        """The gate's one line: why it failed, or that it passed; either way how many cells it judged."""
        judged = f"{self.judged} of {self.cells} cell(s) judged"
        over = (
            f"{len(self.passed_over)} passed over (--skip-unjudged): "
            + ", ".join(markup_free(x.cell_id) for x in self.passed_over)
            if self.passed_over
            else ""
        )
        limit = f"{self.limit * 100:g}%"
        if self.passed:
            return f"gate passed: {judged}, none regressed by more than {limit}" + (
                f"; {over}" if over else ""
            )
        failures = []
        if self.regressed:
            names = ", ".join(f"{markup_free(x.cell_id)} ({x.ratio:.2f}x)" for x in self.regressed)
            failures.append(f"{len(self.regressed)} cell(s) regressed by more than {limit}: {names}")
        if self.unjudged:
            failures.append(unjudged_line(self.unjudged))
        if not failures:  # nothing failed it, and nothing was judged
            return f"the gate judged none of {self.cells} cell(s): nothing to pass" + (
                f" ({over})" if over else ""
            )
        return "; and ".join(failures) + f" ({judged})"


def gate(found: list[CellComparison], limit: float, noise: float | None, skip_unjudged: bool = False) -> Gate:
    """--fail-on-regression with `limit` (a fraction). A cell it cannot judge (no figure on a side, a
    number it cannot trust, a disturbed run, a cell in one session only) fails the gate unless the
    user passes over such cells: a broken run must not pass a CI job as `not a regression`; and a gate
    that judged no cell fails. A gate on a cell that ran once on a side needs the noise band (`noise`):
    refused in one line without it."""
    single = [x.cell_id for x in found if x.single]
    if single and noise is None:
        raise ReprokitError(
            f"--fail-on-regression on single runs needs --noise PCT (the run-to-run spread you accept on this "
            f"machine), or sessions run with --repeat 3: {', '.join(single)} ran once on a side"
        )
    worse = [x for x in found if x.verdict == REGRESSED and x.ratio is not None and 1 - x.ratio > limit]
    unjudged = [x for x in found if x.verdict == NOT_COMPARED]
    return Gate(
        limit=limit,
        regressed=worse,
        unjudged=[] if skip_unjudged else unjudged,
        passed_over=unjudged if skip_unjudged else [],
        judged=len(found) - len(unjudged),
        cells=len(found),
    )


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
    """A side as the verdict read it: its figure, and for repeated runs their range and spread."""
    if row is None:
        return None
    world = row.world_size or 1
    low, high = (row.measured_min, row.measured_max) if repeated(row) else (None, None)
    return {
        "session": session.name,
        "measured_per_device": row.measured_per_device,
        "measured_min_per_device": None if low is None else low / world,
        "measured_max_per_device": None if high is None else high / world,
        "spread": row.spread if repeated(row) else None,
        "repeats": row.repeats,
        "samples_per_joule": row.samples_per_joule,
        "definition": row.definition,
    }


def to_json(first: Path, second: Path, found: list[CellComparison], threshold: float, noise: float | None,
            gated: Gate | None = None) -> dict[str, Any]:  # fmt: skip
    """`compare --json` (reprokit/schemas/compare.schema.json): the table's content, and the gate's
    answer when one was asked for."""
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
        if gated is None
        else {
            "limit": gated.limit,
            "regressed": [x.cell_id for x in gated.regressed],
            "unjudged": [{"cell_id": x.cell_id, "why": x.why} for x in gated.unjudged],
            "passed_over": [{"cell_id": x.cell_id, "why": x.why} for x in gated.passed_over],
            "judged": gated.judged,
            "cells": gated.cells,
            "passed": gated.passed,
        },
    }


def print_table(first: Path, second: Path, found: list[CellComparison]) -> None:
    from rich.console import Console
    from rich.table import Table

    from reprokit.report import terminal

    styles = {REGRESSED: "red", IMPROVED: "green", SAME: "", NOT_COMPARED: "yellow"}
    console = Console(width=200)
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
        view.add_column(column, overflow="fold", no_wrap=column == "cell" and not console.is_terminal)
    everywhere = _common_changes(found)
    for x in found:
        a, b = markup(_per_device(x.a)), markup(_per_device(x.b))
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
    terminal.print_whole(console, view)  # a log's cell ids whole, as the session's table's
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
    """A side's figure per device, and for repeated runs the range the verdict read, as they are
    (a range that cannot be trusted is shown beside the reason it was not used)."""
    if row is None or row.measured_per_device is None:
        return "-"
    low, high = _range(row)
    spread = f" [{_number(low)}..{_number(high)}]" if repeated(row) else ""
    return f"{_number(row.measured_per_device)}{spread}"


def _number(value: float) -> str:
    # Any float fits a cell: 1e308 written out is 309 digits.
    return f"{value:,.2f}" if abs(value) < 1e12 else f"{value:.3g}"


def _common_changes(found: list[CellComparison]) -> dict[str, tuple[Any, Any]]:
    compared = [x for x in found if x.a is not None and x.b is not None]
    if not compared:
        return {}
    first = compared[0].changed
    return {k: v for k, v in first.items() if all(x.changed.get(k) == v for x in compared)}
