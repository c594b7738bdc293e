"""A comparison shown: `compare --json` (reprokit/schemas/compare.schema.json) and the terminal's table,
each side's figure and range as the verdict read them, and what changed for every cell said once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reprokit.contract.textsafe import NAME, markup, short
from reprokit.judge.result_row import Row
from reprokit.report.compare import IMPROVED, NOT_COMPARED, REGRESSED, SAME, CellComparison
from reprokit.report.gate import Gate
from reprokit.report.trust import per_device_range, repeated


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
    low, high = per_device_range(row)
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
