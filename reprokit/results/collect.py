"""Collect: results.csv and results.jsonl, derived from a session's run directories (never the reverse).

Because the rows are rebuilt from the run directories every time, `inv collect` after a crash
or a resume always gives the same table as the session itself would have. Each row is a run
directory read as typed records (records.py) and judged against its published figures by
verdicts.py, the one place where measured meets published.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from datetime import datetime
from pathlib import Path
from typing import Any

from reprokit.errors import ReprokitError
from reprokit.plan import accelerators
from reprokit.results import explain, records, verdicts
from reprokit.run import files, rundirs, session

COLUMNS = [
    "recipe",
    "variant",
    "group",
    "scale",
    "accelerator",
    "device_name",
    "device",
    "devices",
    "world_size",
    "nodes",
    "batch_per_device",
    "workers",
    "max_steps",
    "unit",
    "definition",
    "measured",
    "measured_per_device",
    "repeats",
    "measured_min",
    "measured_max",
    "spread",
    "measured_after_warmup",
    "measured_whole_run",
    "measured_gaudi_trainer",
    "reference",
    "reference_devices",
    "reference_per_device",
    "reference_source",
    "normalization",
    "ratio_per_device",
    "tolerance",
    "verdict",
    "verdict_reasons",
    "quality_departures",
    "measured_speedup",
    "published_speedup",
    "speedup_reference_device",
    "speedup_verdict",
    "speedup_verdict_reasons",
    "scaling_efficiency",
    "status",
    "error",
    "steps",
    "train_time_s",
    "wall_time_s",
    "peak_memory_bytes",
    "flops_per_sample",
    "mfu",
    # Where the window's time went, the energy per sample, the trace (explain.py).
    *explain.COLUMNS,
    "data",
    "image_id",
    "kit_revision",
    "recipe_hash",
    "torch",
    "transformers",
    "timm",
    "started_at",
    "finished_at",
    "cell_id",
    "session",
]


def run_dirs(session_dir: Path) -> list[Path]:
    runs = session_dir / "runs"
    if not runs.is_dir():
        return []
    return sorted(p for p in runs.iterdir() if (p / rundirs.FILES["cell"]).exists() or (p / rundirs.FILES["summary"]).exists())


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.strptime(text, session.TIME_FORMAT)
    except ValueError:
        try:
            return datetime.fromisoformat(text)
        except ValueError:
            return None


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


def row(run_dir: Path) -> dict[str, Any]:
    record = records.read(run_dir)
    cell, sysinfo, summary = record.cell, record.sysinfo, record.summary
    extra = (summary.model_extra or {}) if summary else {}
    ok = record.status == "ok"
    world = int((summary and summary.world_size) or sysinfo.world_size or cell.devices or 1)
    nodes = int((summary and summary.num_nodes) or sysinfo.num_nodes or cell.nodes or 1)
    device = _device_key(record)
    judged = verdicts.judge(record, device, world, nodes)
    reference = judged.reference
    args = cell.args
    roles = cell.roles
    begun, ended = _parse_time(record.started_at), _parse_time(summary.finished_at if summary else None)
    wall = (ended - begun).total_seconds() if begun and ended and ended.tzinfo and begun.tzinfo else None
    return {
        "recipe": cell.recipe,
        "variant": cell.variant,
        "group": cell.group,
        "scale": cell.scale,
        "accelerator": cell.accelerator,
        "device_name": sysinfo.device_name,
        "device": device,
        "devices": cell.devices,
        "world_size": world,
        "nodes": nodes,
        "batch_per_device": args.get(roles.get("batch_per_device", "")),
        "workers": args.get(roles.get("workers", "")),
        "max_steps": args.get(roles.get("max_steps", "")),
        "unit": cell.unit,
        "definition": judged.definition,
        "measured": judged.measured,
        "measured_per_device": judged.measured_per_device,
        **{f"measured_{name}": value for name, value in judged.measurements.items()},
        "reference": reference["value"] if reference else None,
        "reference_devices": verdicts.total_devices(reference) if reference else None,
        "reference_per_device": judged.reference_per_device,
        "reference_source": (reference or {}).get("source"),
        "normalization": judged.normalization,
        "ratio_per_device": judged.ratio,
        "tolerance": float(cell.tolerance or 0.10),
        "verdict": judged.verdict,
        "verdict_reasons": "; ".join(judged.reasons) or None,
        "quality_departures": "; ".join(verdicts.beside(judged.departures)) or None,
        "measured_speedup": None,
        "published_speedup": None,
        "speedup_reference_device": None,
        "speedup_verdict": None,
        "speedup_verdict_reasons": None,
        "scaling_efficiency": None,
        "status": record.status,
        "error": summary.error if summary and not ok else None,
        "steps": summary.steps if summary else None,
        "train_time_s": extra.get("train_runtime_s"),
        "wall_time_s": round(wall, 3) if wall is not None else None,
        "peak_memory_bytes": extra.get("peak_memory_bytes"),
        "flops_per_sample": extra.get("flops_per_sample"),
        "mfu": extra.get("mfu") if ok else None,
        **(explain.columns(extra, run_dir) if ok else {}),
        "data": ";".join(f"{k}={v}" for k, v in cell.data.items()) or None,
        "image_id": sysinfo.image_id,
        "kit_revision": cell.kit_revision,
        "recipe_hash": cell.recipe_hash,
        "torch": sysinfo.versions.get("torch"),
        "transformers": sysinfo.versions.get("transformers"),
        "timm": sysinfo.versions.get("timm"),
        "started_at": record.started_at,
        "finished_at": summary.finished_at if summary else None,
        "cell_id": cell.cell_id or run_dir.name,
        "series_id": (cell.model_extra or {}).get("series_id") or cell.cell_id or run_dir.name,
        # Not CSV columns (see COLUMNS); kept in results.jsonl and used by the report.
        "provenance": provenance(record),
        "baseline": cell.baseline,
        "title": cell.title,
        "references": cell.references,
        "other_references": cell.other_references,
        "measurements": judged.measurements,
        "departures": [d.model_dump() for d in judged.departures],
        "assumptions": cell.assumptions,
        "beyond": cell.beyond,
        "software": summary.software if summary else {},
        "software_published": cell.software,
        "published_stack": cell.published_stack,
        "published_stack_source": cell.published_stack_source,
        "versions": sysinfo.versions,
        "log_tail": extra.get("log_tail") if not ok else None,
        "run_dir": run_dir.name,
    }


def _planned_rows(session_dir: Path, found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows in the session's planned order, with the planned cells that never started included."""
    planned = session.stored(session_dir).get("cells") or []
    by_id = {r["cell_id"]: r for r in found}
    ordered: list[dict[str, Any]] = []
    for item in planned:
        if item["cell_id"] in by_id:
            ordered.append(by_id.pop(item["cell_id"]))
        else:
            ordered.append(
                {
                    **dict.fromkeys(COLUMNS),
                    "recipe": item.get("recipe"),
                    "variant": item.get("variant"),
                    "scale": item.get("scale"),
                    "accelerator": item.get("accelerator"),
                    "status": "not started",
                    "verdict": verdicts.NO_RESULT,
                    "recipe_hash": item.get("recipe_hash"),
                    "cell_id": item["cell_id"],
                    "baseline": bool(item.get("baseline")),
                    "references": [],
                    "other_references": [],
                    "measurements": {},
                    "departures": [],
                    "assumptions": [],
                    "log_tail": None,
                    "run_dir": None,
                }
            )
    return ordered + list(by_id.values())


def rows(session_dir: Path) -> list[dict[str, Any]]:
    result = aggregate(_planned_rows(session_dir, [row(d) for d in run_dirs(session_dir)]))
    for r in result:
        r["session"] = session_dir.name
    verdicts.speedups(result)
    verdicts.scaling_efficiency(result)
    return result


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def aggregate(table: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per series: the repetitions of a cell (--repeat N) become their median, min, max and
    spread, and the verdict is the median's."""
    series: dict[str, list[dict[str, Any]]] = {}
    for r in table:
        series.setdefault(r.get("series_id") or r["cell_id"], []).append(r)
    result = []
    for series_id, runs in series.items():
        if len(runs) == 1:
            result.append({**runs[0], "repeats": 1 if runs[0].get("status") == "ok" else 0})
            continue
        done = [r for r in runs if r.get("status") == "ok" and r.get("measured") is not None]
        first = done[0] if done else runs[0]
        agg = {**first, "cell_id": series_id, "run_dir": None, "repetitions": [
            {k: r.get(k) for k in ("cell_id", "status", "measured", "measured_per_device", "error")} for r in runs
        ]}  # fmt: skip
        agg["repeats"] = len(done)
        agg["status"] = "ok" if len(done) == len(runs) else ("partial" if done else first.get("status"))
        if done:
            values = [r["measured"] for r in done]
            median = _median(values)
            world = first.get("world_size") or 1
            agg.update(
                measured=median,
                measured_per_device=median / world,
                measured_min=min(values),
                measured_max=max(values),
                spread=(max(values) - min(values)) / median if median else None,
            )
            for name in first.get("measurements") or {}:
                found = [r["measurements"][name] for r in done if r["measurements"].get(name) is not None]
                agg[f"measured_{name}"] = _median(found) if found else None
                agg["measurements"] = {**agg["measurements"], name: agg[f"measured_{name}"]}
            per_joule = [r["samples_per_joule"] for r in done if r.get("samples_per_joule") is not None]
            agg["samples_per_joule"] = _median(per_joule) if per_joule else None
            reasons = list(
                dict.fromkeys(x for r in done for x in (r.get("verdict_reasons") or "").split("; ") if x)
            )
            ratio, outcome, why = verdicts.judge_value(
                agg["measured_per_device"], first.get("reference_per_device"), first["tolerance"], reasons
            )
            agg.update(ratio_per_device=ratio, verdict=outcome, verdict_reasons="; ".join(why) or None)
        result.append(agg)
    return result


def collect(session_dir: Path) -> list[dict[str, Any]]:
    """Rebuild results.csv, results.jsonl and the tensorboard/ folder from the run directories."""
    if not session_dir.is_dir():
        raise ReprokitError(f"session folder {session_dir} does not exist")
    table = rows(session_dir)
    write_atomic(session_dir / "results.csv", csv_text(table))
    write_atomic(
        session_dir / "results.jsonl",
        "".join(json.dumps(_jsonl(r), default=str, sort_keys=True) + "\n" for r in table),
    )
    try:
        _gather_tensorboard(session_dir)
    except OSError as exc:
        # A copy for convenience (the run directories hold the event files): a full disk must not
        # cost the report; a half copy is not left to look whole.
        if not files.is_storage_failure(exc):
            raise
        shutil.rmtree(session_dir / "tensorboard", ignore_errors=True)
    return table


def _jsonl(r: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in r.items() if k != "run_dir"}


def csv_text(table: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in table:
        writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in COLUMNS})
    return buffer.getvalue()


def write_atomic(path: Path, text: str) -> None:
    # Readers (and a Ctrl-C in the middle) see the old file or the new one, never half a row.
    files.write_text(path, text)


def _gather_tensorboard(session_dir: Path) -> None:
    """All cells' event files under one folder, so one `tensorboard --logdir` shows them side by side."""
    target = session_dir / "tensorboard"
    if target.exists():
        shutil.rmtree(target)
    for run_dir in run_dirs(session_dir):
        source = run_dir / "tensorboard"
        if source.is_dir() and any(source.rglob("events.out.tfevents.*")):
            shutil.copytree(source, target / run_dir.name)
