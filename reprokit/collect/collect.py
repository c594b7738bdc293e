"""Collect: results.csv and results.jsonl, derived from a session's run directories (never the reverse).

Because the rows are rebuilt from the run directories every time, `inv collect` after a crash
or a resume always gives the same table as the session itself would have. Each row is a run
directory read as typed records (records.py) and judged against its published figures by
verdicts.py, the one place where measured meets published, into a Row (judge/result_row.py); the repetitions of a
cell (repeats.py), the speedups and scaling efficiencies (ratios.py) come back as values and make new
rows, never changed in place.

Every file is read through the bounded reader (run/bounded.py): a run directory whose file is not the
kit's (nested too deep, a time no run had, a field of the wrong type, a link out of the results folder)
is a row with status `unreadable` naming the file and why, and the other cells are collected; a
session.json that is not the kit's leaves the plan out. Each is said: `skipped: <path>: <reason>`.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from reprokit.collect import explain, results_folder, systemdesc
from reprokit.contract import bounded, files, records, rundirs, sessions, writelock
from reprokit.contract.bounded import Malformed
from reprokit.contract.errors import ReprokitError
from reprokit.contract.textsafe import line
from reprokit.judge import ratios, repeats, verdicts
from reprokit.judge.result_row import Row, csv_text, measured_columns
from reprokit.plan import accelerators

# A cell whose run directory holds a file the kit will not read (its error names the file and why).
UNREADABLE = "unreadable"


@dataclass
class Collected:
    """A session's rows, and what was left out of them (a file and why, each said as `skipped: ...`)."""

    rows: list[Row]
    skipped: list[Malformed] = field(default_factory=list)

    def skipped_lines(self) -> list[str]:
        return [s.skipped() for s in self.skipped]


def run_dirs(session_dir: Path) -> list[Path]:
    runs = session_dir / sessions.RUNS
    if not runs.is_dir():
        return []
    return sorted(
        p
        for p in runs.iterdir()
        if (p / rundirs.FILES["cell"]).exists() or (p / rundirs.FILES["summary"]).exists()
    )


def _device_key(record: records.RunRecord) -> str | None:
    try:
        profile = accelerators.get(record.cell.accelerator or "cpu")
    except ReprokitError:  # an unknown profile in an old session must not stop the table
        return None
    return profile.device_key(record.sysinfo.device_name)


def provenance(record: records.RunRecord) -> dict[str, Any]:
    """What differs between two runs of one cell when their numbers do: where, on what, with what."""
    info = record.sysinfo
    extra = info.model_extra or {}
    hardware = extra.get("hardware") or {}
    return {
        "hostname": extra.get("hostname"),
        # A run from before sysinfo's `machine` has none; machines.name tells it from what it has.
        **({"machine": extra["machine"]} if extra.get("machine") else {}),
        "device_name": info.device_name,
        "driver": extra.get("driver"),
        "cuda": extra.get("cuda"),
        "torch": info.versions.get("torch"),
        "transformers": info.versions.get("transformers"),
        "image_id": info.image_id,
        "kit_revision": record.cell.kit_revision,
        "recipe_hash": record.cell.recipe_hash,
        # The hardware's facts that are one value each (a number that is not finite is no fact).
        **{
            f"hw_{k}": v
            for k, v in hardware.items()
            if isinstance(v, str | int | bool | None) or (isinstance(v, float) and math.isfinite(v))
        },
    }


def _count(value: Any) -> int | None:
    """A trainer argument that counts (batch, workers, steps) as the row's column holds it."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def unreadable(run_dir: Path, session_dir: Path, problem: Malformed, planned: dict[str, Any] | None) -> Row:
    """The row of a cell whose run directory holds a file the kit will not read: no result, and why."""
    where = os.path.relpath(problem.path, session_dir)
    base = Row.planned(planned) if planned else Row(cell_id=run_dir.name)
    return replace(
        base,
        status=UNREADABLE,
        verdict=verdicts.NO_RESULT,
        error=f"{line(os.fsdecode(where))}: {problem.reason}",
        series_id=base.cell_id,
        run_dir=run_dir.name,
    )


def row(run_dir: Path, root: Path | None = None) -> Row:
    """A run directory's row: what the host planned, on what it ran, what it measured, and the
    judgement of that against the published figures; bounded.Malformed (a file and why) when one of
    its files is not the kit's. `root`: the results folder, which no file read may leave."""
    return _row(records.read(run_dir, root), run_dir)


def _row(record: records.RunRecord, run_dir: Path) -> Row:
    cell, sysinfo, summary = record.cell, record.sysinfo, record.summary
    world = int((summary and summary.world_size) or sysinfo.world_size or cell.devices or 1)
    nodes = int((summary and summary.num_nodes) or sysinfo.num_nodes or cell.nodes or 1)
    device = _device_key(record)
    judged = verdicts.judge(record, device, world, nodes)
    return Row(
        **_planned(cell),
        device_name=sysinfo.device_name,
        device=device,
        world_size=world,
        nodes=nodes,
        image_id=sysinfo.image_id,
        torch=sysinfo.versions.get("torch"),
        transformers=sysinfo.versions.get("transformers"),
        timm=sysinfo.versions.get("timm"),
        versions=sysinfo.versions,
        provenance=provenance(record),
        **_judged(judged),
        **_ran(record, run_dir),
        cell_id=cell.cell_id or run_dir.name,
        series_id=(cell.model_extra or {}).get("series_id") or cell.cell_id or run_dir.name,
        run_dir=run_dir.name,
    )


def _planned(cell: records.CellRecord) -> dict[str, Any]:
    """What the host planned (cell.json): the cell, its arguments' roles, its published figures."""
    args, roles = cell.args, cell.roles
    return {
        "recipe": cell.recipe,
        "variant": cell.variant,
        "group": cell.group,
        "scale": cell.scale,
        "accelerator": cell.accelerator,
        "devices": cell.devices,
        "batch_per_device": _count(args.get(roles.get("batch_per_device", ""))),
        "workers": _count(args.get(roles.get("workers", ""))),
        "max_steps": _count(args.get(roles.get("max_steps", ""))),
        "unit": cell.unit,
        "tolerance": float(cell.tolerance or 0.10),
        "data": ";".join(f"{k}={v}" for k, v in cell.data.items()) or None,
        "kit_revision": cell.kit_revision,
        "recipe_hash": cell.recipe_hash,
        "baseline": cell.baseline,
        "title": cell.title,
        "references": cell.references,
        "other_references": cell.other_references,
        "assumptions": cell.assumptions,
        "beyond": cell.beyond,
        "software_published": cell.software,
        "published_stack": cell.published_stack,
        "published_stack_source": cell.published_stack_source,
    }


def _judged(judged: verdicts.Judgement) -> dict[str, Any]:
    """The comparison: the figure judged, the published one beside it, the verdict and why."""
    reference = judged.reference or {}
    return {
        "definition": judged.definition,
        "measured": judged.measured,
        "measured_per_device": judged.measured_per_device,
        **measured_columns(judged.measurements),
        "measurements": judged.measurements,
        "reference": reference.get("value"),
        "reference_devices": verdicts.total_devices(reference) if judged.reference else None,
        "reference_per_device": judged.reference_per_device,
        "reference_source": reference.get("source"),
        "normalization": judged.normalization,
        "ratio_per_device": judged.ratio,
        "verdict": judged.verdict,
        "verdict_reasons": "; ".join(judged.reasons) or None,
        "quality_departures": "; ".join(verdicts.beside(judged.departures)) or None,
        "departures": judged.departures,
    }


def _ran(record: records.RunRecord, run_dir: Path) -> dict[str, Any]:
    """How the run went (summary.json): its status, times, memory, and where its window went; the
    error and the log's tail of a run that did not complete."""
    summary = record.summary
    extra = (summary.model_extra or {}) if summary else {}
    ok = record.status == "ok"
    finished = summary.finished_at if summary else None
    begun, ended = sessions.parse_time(record.started_at), sessions.parse_time(finished)
    return {
        "status": record.status,
        "error": summary.error if summary and not ok else None,
        "steps": summary.steps if summary else None,
        "train_time_s": extra.get("train_runtime_s"),
        **_step_times(extra.get("step_time_s") if ok else None),
        "wall_time_s": round((ended - begun).total_seconds(), 3) if begun and ended else None,
        "peak_memory_bytes": extra.get("peak_memory_bytes"),
        "peak_memory_device_bytes": extra.get("peak_memory_device_bytes"),
        "flops_per_sample": extra.get("flops_per_sample"),
        "mfu": extra.get("mfu") if ok else None,
        "mfu_precision": extra.get("mfu_precision") if ok else None,
        **(explain.columns(extra, run_dir) if ok else {}),
        "started_at": record.started_at,
        "finished_at": finished,
        "software": summary.software if summary else {},
        "log_tail": extra.get("log_tail") if not ok else None,
    }


def _step_times(found: Any) -> dict[str, float | None]:
    """The step-time percentile columns of a summary's ``step_time_s`` (None where a run has none)."""
    found = found if isinstance(found, dict) else {}
    return {
        f"step_time_{q}_s": value
        if records.is_number(value := found.get(q)) and math.isfinite(value)
        else None
        for q in ("p50", "p90", "p99")
    }


def _in_planned_order(found: list[Row], planned: list[dict[str, Any]]) -> list[Row]:
    """Rows in the session's planned order, with the planned cells that never started included."""
    by_id = {r.cell_id: r for r in found}
    ordered = [by_id.pop(item["cell_id"], None) or Row.planned(item) for item in planned]
    return ordered + list(by_id.values())


def read(session_dir: Path) -> Collected:
    """The session's rows: one per series of runs, with the speedups and scaling efficiencies that
    compare them; and the files left out (a cell whose file is malformed is a row that says so)."""
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
            found.append(unreadable(run_dir, session_dir, exc, by_id.get(run_dir.name)))
            continue
        found.append(_row(record, run_dir))
        skipped += [Malformed(path, reason) for path, reason in record.left_out]
    runs = _in_planned_order(found, planned)
    table = [
        replace(repeats.kept(series), **repeats.summary(series), session=session_dir.name)
        for series in repeats.series(runs)
    ]
    speedups, efficiency = ratios.speedups(table), ratios.scaling_efficiency(table)
    return Collected(
        [_compared(r, speedups.get(r.cell_id), efficiency.get(r.cell_id)) for r in table], skipped
    )


def rows(session_dir: Path) -> list[Row]:
    """The session's rows (read(), without what was left out)."""
    return read(session_dir).rows


def _compared(r: Row, speedup: ratios.Speedup | None, efficiency: float | None) -> Row:
    return replace(r, **(asdict(speedup) if speedup else {}), scaling_efficiency=efficiency)


def collect(session_dir: Path) -> Collected:
    """Rebuild results.csv, results.jsonl, the systems' MLPerf descriptions (systems/) and the
    tensorboard/ folder from the run directories, holding the session's writers' lock (a report or
    collect started beside this one waits)."""
    if not session_dir.is_dir():
        raise ReprokitError(f"session folder {session_dir} does not exist")
    if results_folder.printable(session_dir.name) != session_dir.name:  # results.jsonl names it, in UTF-8
        raise Malformed(session_dir, "its folder name is not UTF-8")
    with writelock.session(session_dir, "a collect"):
        found = read(session_dir)
        table = found.rows
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
    copied beside it first, then put in place of the old copy (a link there is replaced, not followed).
    Returns what was not copied, and why."""
    root = session_dir.parent
    target = session_dir / sessions.TENSORBOARD
    staging = session_dir / f".{sessions.TENSORBOARD}.new{os.getpid()}"
    for stale in session_dir.glob(f".{sessions.TENSORBOARD}.*"):  # a collect killed before (the lock is ours)
        _remove(stale)
    left: list[Malformed] = []
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
    old = session_dir / f".{sessions.TENSORBOARD}.old{os.getpid()}"
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.exists():
        target.rename(old)
    if staging.exists():
        staging.rename(target)
    _remove(old)
    return left
