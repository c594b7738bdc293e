"""One run directory as a result row: what the host planned (cell.json), on what it ran (sysinfo.json),
what it measured (summary.json), and the judgement of that against the published figures
(judge/verdicts.py) as a Row (judge/result_row.py); or, for a run directory holding a file the kit will
not read, a row of no result that names the file and why. collect.py makes a session's table of them."""

from __future__ import annotations

import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from reprokit.collect import explain
from reprokit.contract import records, sessions
from reprokit.contract.bounded import Malformed
from reprokit.contract.errors import ReprokitError
from reprokit.contract.textsafe import line
from reprokit.judge import releases, verdicts
from reprokit.judge.result_row import Row, measured_columns
from reprokit.plan import accelerators


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
        status=records.UNREADABLE,
        verdict=verdicts.NO_RESULT,
        error=f"{line(os.fsdecode(where))}: {problem.reason}",
        series_id=base.cell_id,
        run_dir=run_dir.name,
    )


def row(run_dir: Path, root: Path | None = None) -> Row:
    """A run directory's row: what the host planned, on what it ran, what it measured, and the
    judgement of that against the published figures; bounded.Malformed (a file and why) when one of
    its files is not the kit's. `root`: the results folder, which no file read may leave."""
    return judged_row(records.read(run_dir, root), run_dir)


def judged_row(record: records.RunRecord, run_dir: Path) -> Row:
    """The row of a run directory read as records (records.read)."""
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
        "reference_source": _source(reference),
        "normalization": judged.normalization,
        "ratio_per_device": judged.ratio,
        "verdict": judged.verdict,
        "verdict_reasons": "; ".join(judged.reasons) or None,
        "quality_departures": "; ".join(verdicts.beside(judged.departures)) or None,
        "departures": judged.departures,
    }


def _source(reference: dict[str, Any]) -> str | None:
    """Where the judged figure comes from, and for a release's figure (--reference) that release."""
    source = reference.get("source")
    if not reference.get("release"):
        return source
    if not reference.get("id"):  # the publication's own, its release named
        return f"{source}; {reference['release']}" if source else reference["release"]
    return "; ".join(x for x in (source, releases.said(reference)) if x)


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
