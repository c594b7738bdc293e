"""Collect: results.csv and results.jsonl, derived from a session's run directories (never the reverse).

Because the rows are rebuilt from the run directories every time, `inv collect` after a crash
or a resume always gives the same table as the session itself would have.

Comparisons live here too, so the CSV, the report and the terminal say the same thing:

- each measured number against its published reference, per device (published figures are
  for whole nodes; a smaller machine is compared device for device), with the recipe's
  tolerance giving a verdict: reproduced, faster, slower, or no reference;
- each variant's speedup over its recipe's baseline measured in the same session, against the
  published speedup: ratios hold across machines where absolute numbers do not.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import accelerators, rundirs
from .errors import ReprokitError

SESSION_FILE = "session.json"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%z"

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
    "normalization",
    "ratio_per_device",
    "tolerance",
    "verdict",
    "measured_speedup",
    "published_speedup",
    "speedup_reference_device",
    "speedup_verdict",
    "scaling_efficiency",
    "status",
    "error",
    "steps",
    "train_time_s",
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

# Verdicts, in the words the report uses.
REPRODUCED, FASTER, SLOWER = "reproduced", "faster", "slower"
NO_REFERENCE, NOT_COMPARABLE, NO_RESULT = "no reference", "not comparable (smoke scale)", "no result"


def run_dirs(session_dir: Path) -> list[Path]:
    runs = session_dir / "runs"
    if not runs.is_dir():
        return []
    return sorted(p for p in runs.iterdir() if (p / "cell.json").exists() or (p / "summary.json").exists())


def session_plan(session_dir: Path) -> dict[str, Any]:
    """The plan `inv reproduce` stored when the session started (empty for sessions without one)."""
    return rundirs.read_json(session_dir / SESSION_FILE) or {}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.strptime(text, TIME_FORMAT)
    except ValueError:
        try:
            return datetime.fromisoformat(text)
        except ValueError:
            return None


def _mtime(path: Path) -> str | None:
    try:
        stamp = path.stat().st_mtime
    except OSError:
        return None
    return datetime.fromtimestamp(stamp, timezone.utc).astimezone().strftime(TIME_FORMAT)


def started_at(run_dir: Path, sysinfo: dict[str, Any], summary: dict[str, Any]) -> str | None:
    """When the trainer started: its own clock in sysinfo.json (written first thing), else the
    file's mtime (runs from before the field existed), else when the host launched the cell
    (cell.json is written just before the launch; all a run that died early has)."""
    return (
        sysinfo.get("started_at")
        or summary.get("started_at")
        or _mtime(run_dir / "sysinfo.json")
        or _mtime(run_dir / "cell.json")
    )


def _total_devices(reference: dict[str, Any]) -> int:
    return int(reference.get("devices") or 1) * int(reference.get("nodes") or 1)


def _reference_for(cell: dict[str, Any], device_key: str | None, world: int, nodes: int) -> dict | None:
    """The published figure on this device; among several, the one run on the most similar setup."""
    matching = [
        r for r in cell.get("references", []) if r.get("value") is not None and r.get("device") == device_key
    ]
    if not matching:
        return None
    return sorted(matching, key=lambda r: (int(r.get("nodes") or 1) != nodes, _total_devices(r) != world))[0]


def verdict(ratio: float | None, tolerance: float, comparable: bool) -> str:
    """Measured over published, within the recipe's relative tolerance or not."""
    if ratio is None:
        return NO_REFERENCE
    if not comparable:
        return NOT_COMPARABLE
    if abs(ratio - 1.0) <= tolerance:
        return REPRODUCED
    return FASTER if ratio > 1.0 else SLOWER


def _status(run_dir: Path, summary: dict[str, Any] | None) -> str:
    if summary:
        return str(summary.get("status") or "unknown")
    # No summary.json: the host died with the cell (kill -9, a power cut) or never launched it.
    return "incomplete" if (run_dir / "stdout.log").exists() else "not started"


def row(run_dir: Path) -> dict[str, Any]:
    cell = rundirs.read_json(run_dir / "cell.json") or {}
    found = rundirs.summary(run_dir)
    summary = found or {}
    sysinfo = rundirs.read_json(run_dir / "sysinfo.json") or {}
    try:
        profile = accelerators.get(cell.get("accelerator", "cpu"))
        device_key = profile.device_key(sysinfo.get("device_name"))
    except ReprokitError:  # an unknown profile in an old session must not stop the table
        device_key = None
    status = _status(run_dir, found)
    ok = status == "ok"
    measured = _number(summary.get("samples_per_second")) if ok else None
    world = int(summary.get("world_size") or sysinfo.get("world_size") or cell.get("devices") or 1)
    nodes = int(summary.get("num_nodes") or sysinfo.get("num_nodes") or cell.get("nodes") or 1)
    reference = _reference_for(cell, device_key, world, nodes)
    ref_devices = _total_devices(reference) if reference else None
    per_device = measured / world if measured is not None else None
    ref_per_device = reference["value"] / ref_devices if reference and ref_devices else None
    comparable = cell.get("scale") == "published"
    ratio = per_device / ref_per_device if per_device is not None and ref_per_device else None
    tolerance = float(cell.get("tolerance") or 0.10)
    args = cell.get("args", {})
    versions = sysinfo.get("versions", {})
    start = started_at(run_dir, sysinfo, summary)
    begun, ended = _parse_time(start), _parse_time(summary.get("finished_at"))
    wall = (ended - begun).total_seconds() if begun and ended and ended.tzinfo and begun.tzinfo else None
    return {
        "recipe": cell.get("recipe"),
        "variant": cell.get("variant"),
        "scale": cell.get("scale"),
        "accelerator": cell.get("accelerator"),
        "device_name": sysinfo.get("device_name"),
        "device": device_key,
        "devices": cell.get("devices"),
        "world_size": world,
        "nodes": nodes,
        "batch_per_device": args.get("per_device_train_batch_size", args.get("batch_size")),
        "workers": args.get("dataloader_num_workers", args.get("workers")),
        "unit": cell.get("unit"),
        "measured": measured,
        "measured_per_device": per_device,
        "trainer_measured": summary.get("train_samples_per_second"),
        "reference": reference["value"] if reference else None,
        "reference_devices": ref_devices,
        "reference_per_device": ref_per_device,
        "normalization": _normalization(world, ref_devices),
        # A smoke-scale number divided by a published one means nothing: the ratio stays empty.
        "ratio_per_device": ratio if comparable else None,
        "tolerance": tolerance,
        "verdict": verdict(ratio, tolerance, comparable) if ok else NO_RESULT,
        "measured_speedup": None,
        "published_speedup": None,
        "speedup_reference_device": None,
        "speedup_verdict": None,
        "scaling_efficiency": None,
        "status": status,
        "error": summary.get("error") if not ok else None,
        "steps": summary.get("steps"),
        "train_time_s": summary.get("train_runtime_s"),
        "wall_time_s": round(wall, 3) if wall is not None else None,
        "peak_memory_bytes": summary.get("peak_memory_bytes"),
        "image_id": sysinfo.get("image_id"),
        "kit_revision": cell.get("kit_revision"),
        "recipe_hash": cell.get("recipe_hash"),
        "torch": versions.get("torch"),
        "transformers": versions.get("transformers"),
        "timm": versions.get("timm"),
        "started_at": start,
        "finished_at": summary.get("finished_at"),
        "cell_id": cell.get("cell_id") or run_dir.name,
        # Not CSV columns (see COLUMNS); kept in results.jsonl and used by the report.
        "baseline": bool(cell.get("baseline", False)),
        "title": cell.get("title"),
        "references": cell.get("references", []),
        "other_references": cell.get("other_references", []),
        "log_tail": summary.get("log_tail") if not ok else None,
        "run_dir": run_dir.name,
    }


def _normalization(world: int, ref_devices: int | None) -> str | None:
    if ref_devices is None:
        return None
    if world == ref_devices:
        return f"same device count ({world})"
    return f"per device ({world} vs {ref_devices} published)"


def _absolute(references: list[dict[str, Any]], device: str) -> float | None:
    """A reference's per-device figure on `device`, for ratios between variants."""
    for r in references:
        if r.get("value") is not None and r.get("device") == device:
            return r["value"] / _total_devices(r)
    return None


def all_references(r: dict[str, Any]) -> list[dict[str, Any]]:
    """This accelerator's references first, then the other accelerators' (for ratios only)."""
    return list(r.get("references") or []) + list(r.get("other_references") or [])


def _speedups(rows: list[dict[str, Any]]) -> None:
    """Each cell's throughput over its recipe's baseline cell measured in the same session, and the
    published speedup: a `ratio` reference, else the ratio of the two published figures on the
    device this ran on (or, where the publication has none for it, on its first device)."""
    baselines = {r["recipe"]: r for r in rows if r.get("baseline")}
    for r in rows:
        base = baselines.get(r["recipe"])
        if base is None or r is base:
            continue
        if r["measured_per_device"] is not None and base["measured_per_device"]:
            r["measured_speedup"] = r["measured_per_device"] / base["measured_per_device"]
        explicit = next((x["ratio"] for x in r["references"] if x.get("ratio") is not None), None)
        if explicit is not None:
            r["published_speedup"] = explicit
        else:
            devices = [x["device"] for x in all_references(base) if x.get("value") is not None]
            for device in ([r["device"]] if r["device"] in devices else []) + devices:
                mine, theirs = _absolute(all_references(r), device), _absolute(all_references(base), device)
                if mine and theirs:
                    r["published_speedup"], r["speedup_reference_device"] = mine / theirs, device
                    break
        if r["measured_speedup"] is not None and r["published_speedup"] is not None:
            # Ratio of ratios, judged with the recipe's tolerance like absolute numbers.
            r["speedup_verdict"] = verdict(
                r["measured_speedup"] / r["published_speedup"], r["tolerance"], r["scale"] == "published"
            )
    for base in baselines.values():
        if base["measured_per_device"] is not None:
            base["measured_speedup"] = base["published_speedup"] = 1.0


def scaling_efficiency(rows: list[dict[str, Any]]) -> None:
    """Each multi-node row's per-device throughput over the single-node row of the same recipe,
    variant, scale and accelerator: 1.0 is perfect scaling (N nodes, N times the samples/s; per
    device, since the per-device batch is the same). The VOLO post's 2100 img/s on five DGX A100
    against 500 on one is 0.84."""
    single = {
        (r["recipe"], r["variant"], r["scale"], r["accelerator"]): r
        for r in rows
        if r.get("nodes") == 1 and r.get("measured_per_device")
    }
    for r in rows:
        base = single.get((r["recipe"], r["variant"], r["scale"], r["accelerator"]))
        if base is not None and (r.get("nodes") or 1) > 1 and r.get("measured_per_device") is not None:
            r["scaling_efficiency"] = r["measured_per_device"] / base["measured_per_device"]


def _planned_rows(session_dir: Path, found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows in the session's planned order, with the planned cells that never started included."""
    planned = session_plan(session_dir).get("cells") or []
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
                    "verdict": NO_RESULT,
                    "recipe_hash": item.get("recipe_hash"),
                    "cell_id": item["cell_id"],
                    "baseline": bool(item.get("baseline")),
                    "references": [],
                    "other_references": [],
                    "log_tail": None,
                    "run_dir": None,
                }
            )
    return ordered + list(by_id.values())


def rows(session_dir: Path) -> list[dict[str, Any]]:
    result = _planned_rows(session_dir, [row(d) for d in run_dirs(session_dir)])
    _speedups(result)
    scaling_efficiency(result)
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
    _gather_tensorboard(session_dir)
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
