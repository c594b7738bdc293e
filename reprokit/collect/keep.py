"""What a collect keeps of the last one: a row results.jsonl stored, read from a run directory that is
gone now (a session copied without runs/, a pruned cell) or cannot be read (a summary.json another
program broke), stands in place of the `not started` or `unreadable` row the run directories alone
would give, with its figure, verdict and provenance as they were read, and why it was not read again
(`Row.kept`). A measured number is never replaced by a worse-informed row; a row never measured stays
`not started`, and a collect whose run directories are back reads them again.

Rows are per series (judge/repeats.py): a series one of whose runs is gone or unreadable keeps its
stored row whole (the median of all its runs), since the runs that remain would give a median of
fewer. A kept row takes part in the session's ratios (speedups, scaling), computed afresh with the
rows read now: its own are cleared here, as every row's are before ratios.py fills them.
"""

from __future__ import annotations

import os
from dataclasses import asdict, replace
from pathlib import Path

from reprokit.contract import records, sessions
from reprokit.judge.ratios import Speedup
from reprokit.judge.result_row import Row

NOT_STARTED, UNREADABLE = records.NOT_STARTED, records.UNREADABLE
# Rows that were not read from a run: nothing in them to keep.
NOT_READ = (NOT_STARTED, UNREADABLE, None)
# What a run directory without a summary.json reads as (records.py): started and cut off, or not started.
NO_SUMMARY = (NOT_STARTED, records.INCOMPLETE)
KEPT = "the row stored by the last collect is kept"
# A kept row's ratios, cleared: collect computes them again over the rows of this collect.
NO_RATIOS = {**asdict(Speedup()), "scaling_efficiency": None}


def _runs(stored: Row) -> dict[str | None, str | None]:
    """The runs a stored row was made of (its repetitions, else itself), and each one's status then."""
    if stored.repetitions:
        return {r.get("cell_id"): r.get("status") for r in stored.repetitions}
    return {stored.cell_id: stored.status}


def _why_not_read(run_id: str, fresh: Row | None, before: str | None, session_dir: Path) -> str | None:
    """Why a run read before (with status `before`) is not read now: its run directory is gone, a file
    in it cannot be read (its `unreadable` row names it), or a run that measured has lost its
    summary.json; None when it reads as well as it did (a cell rerun by a resume, say)."""
    where = f"{sessions.RUNS}/{run_id}"
    if before in NOT_READ:
        return None
    if fresh is None or fresh.run_dir is None:
        if not os.path.isdir(session_dir / sessions.RUNS):
            return f"{sessions.RUNS}/ is gone"
        return f"{where} holds no run" if os.path.isdir(session_dir / where) else f"{where} is gone"
    if fresh.status == UNREADABLE:
        return fresh.error or f"{where} cannot be read"
    if fresh.status in NO_SUMMARY and before == "ok":  # a resume never reruns a complete cell
        return f"{where}/summary.json is gone"
    return None


def keep(runs: list[Row], stored: list[Row], session_dir: Path) -> list[Row]:
    """`runs` (a row per run directory or planned cell, as read now) with each stored row whose runs
    were read then and are not now put in place of those runs' rows, `kept` saying why; a stored row
    none of whose runs is among `runs` (no plan names it, its folder is gone) comes last."""
    fresh = {r.cell_id: r for r in runs}
    kept: dict[str | None, Row] = {}
    covering: dict[str | None, str | None] = {}
    for row in stored:
        reasons = []
        for run_id, before in _runs(row).items():
            covering[run_id] = row.cell_id
            why = _why_not_read(str(run_id), fresh.get(run_id), before, session_dir)
            if why is not None:
                reasons.append(why)
        if reasons:
            kept[row.cell_id] = replace(row, **NO_RATIOS, kept=f"{'; '.join(dict.fromkeys(reasons))}: {KEPT}")
    if not kept:
        return runs
    found, placed = [], set()
    for r in runs:
        owner = covering.get(r.cell_id)
        if owner in kept:
            if owner not in placed:  # the stored series' row where its first run was
                found.append(kept[owner])
                placed.add(owner)
            continue
        found.append(r)
    return found + [row for cell_id, row in kept.items() if cell_id not in placed]
