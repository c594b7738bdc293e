"""Collect: results.csv and results.jsonl, derived from a session's run directories (never the reverse).

Because the rows are rebuilt from the run directories every time, `inv collect` after a crash
or a resume always gives the same table as the session itself would have. Each row is a run
directory read as typed records (records.py) and judged against its published figures by
verdicts.py, the one place where measured meets published, into a Row (row.py); the repetitions of a
cell (repeats.py), the speedups and scaling efficiencies (ratios.py) come back as values and make new
rows, never changed in place.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from reprokit.errors import ReprokitError
from reprokit.plan import accelerators
from reprokit.results import explain, ratios, records, repeats, systemdesc, verdicts
from reprokit.results.row import Row, csv_text, measured_columns
from reprokit.run import files, rundirs, session


def run_dirs(session_dir: Path) -> list[Path]:
    runs = session_dir / session.RUNS
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
        **{f"hw_{k}": v for k, v in hardware.items() if not isinstance(v, dict | list)},
    }


def row(run_dir: Path) -> Row:
    """A run directory's row: what the host planned, on what it ran, what it measured, and the
    judgement of that against the published figures."""
    record = records.read(run_dir)
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
        "batch_per_device": args.get(roles.get("batch_per_device", "")),
        "workers": args.get(roles.get("workers", "")),
        "max_steps": args.get(roles.get("max_steps", "")),
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
    begun, ended = session.parse_time(record.started_at), session.parse_time(finished)
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
        f"step_time_{q}_s": value if isinstance(value := found.get(q), int | float) else None
        for q in ("p50", "p90", "p99")
    }


def _in_planned_order(session_dir: Path, found: list[Row]) -> list[Row]:
    """Rows in the session's planned order, with the planned cells that never started included."""
    planned = session.stored(session_dir).get("cells") or []
    by_id = {r.cell_id: r for r in found}
    ordered = [by_id.pop(item["cell_id"], None) or Row.planned(item) for item in planned]
    return ordered + list(by_id.values())


def rows(session_dir: Path) -> list[Row]:
    """The session's rows: one per series of runs, with the speedups and scaling efficiencies that
    compare them."""
    runs = _in_planned_order(session_dir, [row(d) for d in run_dirs(session_dir)])
    table = [
        replace(repeats.kept(series), **repeats.summary(series), session=session_dir.name)
        for series in repeats.series(runs)
    ]
    speedups, efficiency = ratios.speedups(table), ratios.scaling_efficiency(table)
    return [_compared(r, speedups.get(r.cell_id), efficiency.get(r.cell_id)) for r in table]


def _compared(r: Row, speedup: ratios.Speedup | None, efficiency: float | None) -> Row:
    return replace(r, **(asdict(speedup) if speedup else {}), scaling_efficiency=efficiency)


def collect(session_dir: Path) -> list[Row]:
    """Rebuild results.csv, results.jsonl, the systems' MLPerf descriptions (systems/) and the
    tensorboard/ folder from the run directories."""
    if not session_dir.is_dir():
        raise ReprokitError(f"session folder {session_dir} does not exist")
    table = rows(session_dir)
    # Readers (and a Ctrl-C in the middle) see the old file or the new one, never half a row.
    files.write_text(session_dir / session.RESULTS_CSV, csv_text(table))
    files.write_text(
        session_dir / session.RESULTS_JSONL,
        "".join(json.dumps(r.to_json(), default=str, sort_keys=True) + "\n" for r in table),
    )
    systemdesc.write(session_dir, table)
    try:
        _gather_tensorboard(session_dir)
    except OSError as exc:
        # A copy for convenience (the run directories hold the event files): a full disk must not
        # cost the report; a half copy is not left to look whole.
        if not files.is_storage_failure(exc):
            raise
        shutil.rmtree(session_dir / session.TENSORBOARD, ignore_errors=True)
    return table


def _gather_tensorboard(session_dir: Path) -> None:
    """All cells' event files under one folder, so one `tensorboard --logdir` shows them side by side."""
    target = session_dir / session.TENSORBOARD
    if target.exists():
        shutil.rmtree(target)
    for run_dir in run_dirs(session_dir):
        source = run_dir / rundirs.FILES["tensorboard"]
        if source.is_dir() and any(source.rglob("events.out.tfevents.*")):
            shutil.copytree(source, target / run_dir.name)
