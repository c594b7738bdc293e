"""Collect: results.csv and results.jsonl, derived from a session's run directories (never the reverse).

Because the rows are rebuilt from the run directories every time, `inv collect` after a crash
or a resume always gives the same table as the session itself would have.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

from . import accelerators, rundirs
from .errors import ReprokitError

COLUMNS = [
    "recipe",
    "variant",
    "scale",
    "accelerator",
    "device_name",
    "device",
    "devices",
    "world_size",
    "nodes",
    "batch_per_device",
    "workers",
    "unit",
    "measured",
    "measured_per_device",
    "trainer_measured",
    "reference",
    "reference_devices",
    "reference_per_device",
    "ratio_per_device",
    "measured_speedup",
    "published_speedup",
    "status",
    "error",
    "steps",
    "wall_time_s",
    "peak_memory_bytes",
    "image_id",
    "kit_revision",
    "recipe_hash",
    "torch",
    "transformers",
    "timm",
    "started_at",
    "finished_at",
    "cell_id",
]


def run_dirs(session_dir: Path) -> list[Path]:
    runs = session_dir / "runs"
    return sorted(p for p in runs.iterdir() if (p / "cell.json").exists()) if runs.is_dir() else []


def _reference_for(cell: dict[str, Any], device_key: str | None) -> dict[str, Any] | None:
    absolute = [r for r in cell.get("references", []) if r.get("value") is not None]
    exact = [r for r in absolute if r.get("device") == device_key]
    return (exact or [None])[0]


def row(run_dir: Path) -> dict[str, Any]:
    cell = rundirs.read_json(run_dir / "cell.json") or {}
    summary = rundirs.summary(run_dir) or {"status": "not started"}
    sysinfo = rundirs.read_json(run_dir / "sysinfo.json") or {}
    try:
        profile = accelerators.get(cell.get("accelerator", "cpu"))
        device_key = profile.device_key(sysinfo.get("device_name"))
    except Exception:  # an unknown profile in an old session must not stop the table
        device_key = None
    measured = summary.get("samples_per_second")
    world = summary.get("world_size") or sysinfo.get("world_size") or cell.get("devices") or 1
    reference = _reference_for(cell, device_key)
    per_device = measured / world if isinstance(measured, int | float) else None
    ref_per_device = reference["value"] / reference["devices"] if reference else None
    args = cell.get("args", {})
    versions = sysinfo.get("versions", {})
    return {
        "recipe": cell.get("recipe"),
        "variant": cell.get("variant"),
        "scale": cell.get("scale"),
        "accelerator": cell.get("accelerator"),
        "device_name": sysinfo.get("device_name"),
        "device": device_key,
        "devices": cell.get("devices"),
        "world_size": world,
        "nodes": summary.get("num_nodes") or cell.get("nodes"),
        "batch_per_device": args.get("per_device_train_batch_size"),
        "workers": args.get("dataloader_num_workers"),
        "unit": cell.get("unit"),
        "measured": measured,
        "measured_per_device": per_device,
        "trainer_measured": summary.get("train_samples_per_second"),
        "reference": reference["value"] if reference else None,
        "reference_devices": reference["devices"] if reference else None,
        "reference_per_device": ref_per_device,
        "ratio_per_device": per_device / ref_per_device if per_device and ref_per_device else None,
        "measured_speedup": None,
        "published_speedup": next(
            (r["ratio"] for r in cell.get("references", []) if r.get("ratio") is not None), None
        ),
        "status": summary.get("status"),
        "error": summary.get("error"),
        "steps": summary.get("steps"),
        "wall_time_s": summary.get("train_runtime_s"),
        "peak_memory_bytes": summary.get("peak_memory_bytes"),
        "image_id": sysinfo.get("image_id"),
        "kit_revision": cell.get("kit_revision"),
        "recipe_hash": cell.get("recipe_hash"),
        "torch": versions.get("torch"),
        "transformers": versions.get("transformers"),
        "timm": versions.get("timm"),
        "started_at": summary.get("started_at"),
        "finished_at": summary.get("finished_at"),
        "cell_id": cell.get("cell_id"),
        "baseline": cell.get("baseline", False),
    }


def _speedups(rows: list[dict[str, Any]]) -> None:
    """Each cell's throughput over its recipe's baseline cell measured in the same session."""
    baselines = {
        r["recipe"]: r["measured"]
        for r in rows
        if r.get("baseline") and isinstance(r.get("measured"), int | float)
    }
    for r in rows:
        base = baselines.get(r["recipe"])
        if base and isinstance(r.get("measured"), int | float):
            r["measured_speedup"] = r["measured"] / base


def rows(session_dir: Path) -> list[dict[str, Any]]:
    result = [row(d) for d in run_dirs(session_dir)]
    _speedups(result)
    return result


def collect(session_dir: Path) -> list[dict[str, Any]]:
    """Rebuild results.csv, results.jsonl and the tensorboard/ folder from the run directories."""
    if not session_dir.is_dir():
        raise ReprokitError(f"session folder {session_dir} does not exist")
    table = rows(session_dir)
    _write_atomic(session_dir / "results.csv", _csv_text(table))
    _write_atomic(session_dir / "results.jsonl", "".join(json.dumps(r, default=str) + "\n" for r in table))
    _gather_tensorboard(session_dir)
    return table


def _csv_text(table: list[dict[str, Any]]) -> str:
    import io

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in table:
        writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in COLUMNS})
    return buffer.getvalue()


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _gather_tensorboard(session_dir: Path) -> None:
    """All cells' event files under one folder, so one `tensorboard --logdir` shows them side by side."""
    target = session_dir / "tensorboard"
    if target.exists():
        shutil.rmtree(target)
    for run_dir in run_dirs(session_dir):
        source = run_dir / "tensorboard"
        if source.is_dir() and any(source.rglob("events.out.tfevents.*")):
            shutil.copytree(source, target / run_dir.name)
