"""Collect: results.csv and results.jsonl, derived from a session's run directories (never the reverse).

Because the rows are rebuilt from the run directories every time, `inv collect` after a crash
or a resume always gives the same table as the session itself would have. Each row is a run
directory read as typed records (records.py) and judged against its published figures by
verdicts.py, the one place where measured meets published, into a Row (run_row.py); the repetitions of a
cell (repeats.py), the speedups and scaling efficiencies (ratios.py) come back as values and make new
rows, never changed in place.

Every file is read through the bounded reader (run/bounded.py): a run directory whose file is not the
kit's (nested too deep, a time no run had, a field of the wrong type, a link out of the results folder)
is a row with status `unreadable` naming the file and why, and the other cells are collected; a
session.json that is not the kit's leaves the plan out. Each is said: `skipped: <path>: <reason>`.

What was measured is never lost to a collect: a row the last collect stored (results.jsonl) whose run
directory is gone or unreadable now is kept as stored, saying why (keep.py; `kept: <why>`), and a
results.jsonl that cannot be read is set aside beside it (`results.jsonl.unreadable-N`) before the new
one is written.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from reprokit.collect import keep, results_folder, run_row, systemdesc
from reprokit.contract import bounded, files, records, rundirs, sessions, writelock
from reprokit.contract.bounded import Malformed
from reprokit.contract.errors import ReprokitError
from reprokit.contract.textsafe import line
from reprokit.judge import ratios, repeats
from reprokit.judge.result_row import Row, csv_text

# A cell whose run directory holds a file the kit will not read (its error names the file and why).
UNREADABLE = keep.UNREADABLE
# Where an unreadable results.jsonl goes before a collect writes a new one (nothing stored is lost).
SET_ASIDE = ".unreadable-"


@dataclass
class Collected:
    """A session's rows, and what was left out of them (a file and why, each said as `skipped: ...`)."""

    rows: list[Row]
    skipped: list[Malformed] = field(default_factory=list)
    # The results.jsonl of the last collect, when it could not be read (nothing of it kept in the rows).
    unread: Malformed | None = None

    def skipped_lines(self) -> list[str]:
        return [s.skipped() for s in self.skipped]


def kept_lines(table: list[Row]) -> list[str]:
    """`kept: <cell>: <why>`, one line per row kept from the last collect (keep.py), as `skipped:` lines
    are."""
    return [f"kept: {line(f'{r.cell_id}: {r.kept}')}" for r in table if r.kept]


def run_dirs(session_dir: Path) -> list[Path]:
    runs = session_dir / sessions.RUNS
    if not runs.is_dir():
        return []
    return sorted(
        p
        for p in runs.iterdir()
        if (p / rundirs.FILES["cell"]).exists() or (p / rundirs.FILES["summary"]).exists()
    )


def _in_planned_order(found: list[Row], planned: list[dict[str, Any]]) -> list[Row]:
    """Rows in the session's planned order, with the planned cells that never started included."""
    by_id = {r.cell_id: r for r in found}
    ordered = [by_id.pop(item["cell_id"], None) or Row.planned(item) for item in planned]
    return ordered + list(by_id.values())


def _name(session_dir: Path) -> str:
    """The session's name as its rows hold it: text, whatever bytes its folder's name has (UTF-8 files)."""
    return results_folder.printable(session_dir.name)


def _stored(session_dir: Path) -> tuple[list[Row], Malformed | None]:
    """The rows the last collect stored (results.jsonl), read within bounds as every reader reads them;
    none and why when it cannot be read."""
    path = session_dir / sessions.RESULTS_JSONL
    if not os.path.lexists(path):
        return [], None
    try:
        return results_folder.stored_rows(path, _name(session_dir), session_dir.parent), None
    except Malformed as exc:
        return [], exc


def read(session_dir: Path) -> Collected:
    """The session's rows: one per series of runs, with the speedups and scaling efficiencies that
    compare them; and the files left out (a cell whose file is malformed is a row that says so). A
    row the last collect stored whose run directory is gone or unreadable now is kept as it was
    stored, saying why (keep.py)."""
    root = session_dir.parent
    skipped: list[Malformed] = []
    try:
        planned = sessions.stored(session_dir, root).get("cells") or []
    except Malformed as exc:
        skipped.append(exc)
        planned = []
    by_id = {item["cell_id"]: item for item in planned}
    found = []
    for run_dir in run_dirs(session_dir):
        try:
            record = records.read(run_dir, root)
        except Malformed as exc:
            skipped.append(exc)
            found.append(run_row.unreadable(run_dir, session_dir, exc, by_id.get(run_dir.name)))
            continue
        found.append(run_row.judged_row(record, run_dir))
        skipped += [Malformed(path, reason) for path, reason in record.left_out]
    stored, unread = _stored(session_dir)
    if unread is not None:
        skipped.append(unread)
    runs = keep.keep(_in_planned_order(found, planned), stored, session_dir)
    table = [
        # A kept row is its series' row as stored: its repeats and figures are those of every run.
        replace(series[0], session=_name(session_dir))
        if series[0].kept
        else replace(repeats.kept(series), **repeats.summary(series), session=_name(session_dir))
        for series in repeats.series(runs)
    ]
    speedups, efficiency = ratios.speedups(table), ratios.scaling_efficiency(table)
    return Collected(
        [_compared(r, speedups.get(r.cell_id), efficiency.get(r.cell_id)) for r in table], skipped, unread
    )


def rows(session_dir: Path) -> list[Row]:
    """The session's rows (read(), without what was left out)."""
    return read(session_dir).rows


def _compared(r: Row, speedup: ratios.Speedup | None, efficiency: float | None) -> Row:
    return replace(r, **(asdict(speedup) if speedup else {}), scaling_efficiency=efficiency)


def refuse_folders(session_dir: Path, names: tuple[str, ...]) -> None:
    """One line, before anything is written, when a file the session's writer replaces is a folder (no
    file can take its place, and what it holds is not the kit's to remove)."""
    for name in names:
        path = session_dir / name
        if path.is_dir() and not path.is_symlink():
            raise ReprokitError(
                f"{line(os.fsdecode(path))} is a folder, not a file: nothing was written; "
                f"move it away, then run this again"
            )


def _set_aside(path: Path, problem: Malformed) -> Malformed:
    """An unreadable results.jsonl that is a file, kept beside under a name of its own before a new one
    takes its place (it may hold the only copy of a figure); the reason it was skipped, saying so. A
    link (its target is not the session's, and is left as it is) or a FIFO holds nothing to keep."""
    if not path.is_file() or path.is_symlink():
        return problem
    number = 1
    while os.path.lexists(aside := path.with_name(f"{path.name}{SET_ASIDE}{number}")):
        number += 1
    try:
        os.link(path, aside)  # no copy of up to 256 MiB; the same bytes under a second name
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        shutil.copyfile(path, aside)  # a file system without hard links
    return Malformed(
        problem.path, f"{problem.reason}; set aside as {aside.name}, the rows rebuilt from runs/"
    )


def collect(session_dir: Path) -> Collected:
    """Rebuild results.csv, results.jsonl, the systems' MLPerf descriptions (systems/) and the
    tensorboard/ folder from the run directories, holding the session's writers' lock (a report or
    collect started beside this one waits). A row whose run directory is gone or unreadable keeps what
    the last collect stored (keep.py); a results.jsonl that cannot be read is set aside, never lost."""
    if not session_dir.is_dir():
        raise ReprokitError(f"session folder {session_dir} does not exist")
    with writelock.session(session_dir, "a collect"):
        refuse_folders(session_dir, (sessions.RESULTS_CSV, sessions.RESULTS_JSONL))
        found = read(session_dir)
        table = found.rows
        if found.unread is not None:
            said = _set_aside(session_dir / sessions.RESULTS_JSONL, found.unread)
            found.skipped = [said if s is found.unread else s for s in found.skipped]
        # Readers (and a Ctrl-C in the middle) see the old file or the new one, never half a row.
        files.write_text(session_dir / sessions.RESULTS_CSV, csv_text(table))
        files.write_text(
            session_dir / sessions.RESULTS_JSONL,
            "".join(json.dumps(r.to_json(), default=str, sort_keys=True) + "\n" for r in table),
        )
        systemdesc.write(session_dir, table)
        try:
            found.skipped += _gather_tensorboard(session_dir)
        except OSError as exc:
            # A copy for convenience (the run directories hold the event files): a full disk must not
            # cost the report; a half copy is not left to look whole.
            if not files.is_storage_failure(exc):
                raise
            _remove(session_dir / sessions.TENSORBOARD)
    return found


def _remove(path: Path) -> None:
    """A file, a link (never followed) or a folder, gone."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)


def _copy_events(source: Path, target: Path) -> list[Malformed]:
    """The regular files under a run's tensorboard/ folder, copied; a link (to a file or a folder) is
    not followed, and said."""
    left = []
    for folder, dirs, names in os.walk(source):
        here = Path(folder)
        for name in [*dirs, *names]:
            if (here / name).is_symlink():
                left.append(Malformed(here / name, "a link in a run's tensorboard folder: not copied"))
        for name in names:
            path = here / name
            if path.is_file() and not path.is_symlink():
                destination = target / path.relative_to(source)
                files.make_dir(destination.parent)
                shutil.copyfile(path, destination, follow_symlinks=False)
    return left


def _gather_tensorboard(session_dir: Path) -> list[Malformed]:
    """All cells' event files under one folder, so one `tensorboard --logdir` shows them side by side:
    copied into a folder of this collect's own beside it first (made by mkdtemp under a name nobody
    could have planted a link at), then put in place of the old copy (a link there is replaced, not
    followed). Returns what was not copied, and why."""
    root = session_dir.parent
    target = session_dir / sessions.TENSORBOARD
    for stale in session_dir.glob(f".{sessions.TENSORBOARD}.*"):  # a collect killed before (the lock is ours)
        _remove(stale)
    work = Path(tempfile.mkdtemp(prefix=f".{sessions.TENSORBOARD}.", dir=session_dir))
    staging, old = work / "new", work / "old"
    left: list[Malformed] = []
    try:
        for run_dir in run_dirs(session_dir):
            source = run_dir / rundirs.FILES["tensorboard"]
            if not source.is_dir():
                continue
            try:
                bounded.check_inside(source, root)
            except Malformed as exc:
                left.append(exc)
                continue
            if any(source.rglob("events.out.tfevents.*")):
                left += _copy_events(source, staging / run_dir.name)
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.exists():
            target.rename(old)
        if staging.exists():
            staging.rename(target)
    finally:
        _remove(work)
    return left
