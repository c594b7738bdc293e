"""What a bare GPU node's slices gave, as one table per device and date (benchmarks/results/gpu/).

    python -m benchmarks.node_results node-out/a node-out/b ... --rehearsal REHEARSAL.jsonl

Each argument is a slice's `--out` folder as it came back from the node (scripts/barenode/run.py:
results.csv, results.jsonl, checks.json, runner.log and the node-<slice>.tar.gz archive). What is
kept: those files, each run's summary.json, sysinfo.json and cell.json from the archive (the raw
figures behind every row), and `<device>-<date>.csv` with one row per cell: the software it ran on,
its samples/s under every definition the trainers record, the published per-device figure and the
ratio where one exists, MFU against the bf16 peak the node itself measured (the slice's matmul
check) beside the datasheet's, the step-time breakdown's shares, samples per joule, and the peak
device memory beside the CPU rehearsal's estimate (`make node-rehearsal ARGS="--keep DIR"`, then
DIR/rehearsal.jsonl; `--rehearsal-before` shows an earlier rehearsal's beside it, as a correction's
effect). Everything here is read from the node's files; nothing is computed that the
node did not measure except the ratios between its own numbers.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import sys
import tarfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "gpu"
GIB = 2**30
# The files of each run kept from the archive: the trainer's own record of what ran and what it
# measured; logs, plots and TensorBoard events stay in the archive.
RUN_FILES = ("summary.json", "sysinfo.json", "cell.json")
SLICE_FILES = ("results.csv", "results.jsonl", "checks.json", "runner.log")
COLUMNS = [
    "slice",
    "cell_id",
    "status",
    "why_not",
    "device",
    "driver",
    "cuda",
    "torch",
    "transformers",
    "timm",
    "unit",
    "published_definition",
    "under_published_definition",
    "after_warmup",
    "whole_run",
    "gaudi_trainer",
    "steps",
    "published_per_device",
    "published_normalization",
    "other_devices_published",
    "ratio_per_device",
    "verdict",
    "speedup",
    "speedup_over",
    "mfu_precision",
    "achieved_tflops",
    "mfu_datasheet",
    "peak_tflops_measured",
    "mfu_measured_peak",
    "data_wait_share",
    "compute_share",
    "communication_share",
    "other_share",
    "samples_per_joule",
    "power_mean_w",
    "peak_memory_allocator_gib",
    "peak_memory_device_gib",
    "rehearsal_estimate_gib",
    "rehearsal_error",
    "rehearsal_before_gib",
    "rehearsal_before_error",
]


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def _fmt(value: float | None, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}g}"


def archive_runs(archive: Path) -> dict[str, dict[str, bytes]]:
    """cell id -> {file name: bytes} for the run files kept from a slice's archive."""
    runs: dict[str, dict[str, bytes]] = {}
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            kept = len(parts) == 4 and parts[:2] == ("session", "runs") and parts[3] in RUN_FILES
            if member.isfile() and kept:
                handle = tar.extractfile(member)
                if handle is not None:
                    runs.setdefault(parts[2], {})[parts[3]] = handle.read()
    return runs


def rehearsal_estimates(path: Path | None) -> dict[str, int]:
    """`<slice>/<cell id>` -> the rehearsal's estimate of the cell's peak device memory, in bytes."""
    if path is None:
        return {}
    found = {}
    for line in path.read_text().splitlines():
        result = json.loads(line)
        if result.get("status") == "ok":
            found[result["cell_id"]] = result["memory"]["estimate_bytes"]
    return found


def measured_peaks(checks: list[dict[str, Any]]) -> dict[str, float]:
    """precision -> TFLOP/s of the node's own matmul check (slice a runs it; the others reuse it)."""
    for found in checks:
        matmul = found.get("matmul") or {}
        if matmul.get("available"):
            return matmul["tflops"]
    return {}


def rows_of(
    folder: Path,
    name: str,
    runs: dict[str, dict[str, bytes]],
    estimates: dict[str, int],
    peaks: dict[str, float],
    before: dict[str, int],
) -> list[dict[str, str]]:
    """One row per cell of a slice's results.csv, from its runs' records (`runs`, archive_runs)."""
    others = other_devices(folder / "results.jsonl")
    rows = []
    for row in csv.DictReader(io.StringIO((folder / "results.csv").read_text())):
        files = runs.get(row["cell_id"], {})
        summary = json.loads(files["summary.json"]) if "summary.json" in files else {}
        sysinfo = json.loads(files["sysinfo.json"]) if "sysinfo.json" in files else {}
        rate = _float(row["measured_after_warmup"])
        flops = _float(row["flops_per_sample"])
        achieved = rate * flops / 1e12 if rate and flops else None
        precision = row["mfu_precision"]
        measured_peak = peaks.get(precision) if precision else None
        peak_device = _float(row["peak_memory_device_bytes"])
        estimate = estimates.get(f"{name}/{row['cell_id']}")
        earlier = before.get(f"{name}/{row['cell_id']}")
        rows.append(
            {
                "slice": name,
                "cell_id": row["cell_id"],
                "status": row["status"],
                "why_not": row["error"] or (summary.get("error") or ""),
                "device": row["device_name"] or sysinfo.get("device_name", ""),
                "driver": sysinfo.get("driver", ""),
                "cuda": sysinfo.get("cuda", ""),
                "torch": row["torch"],
                "transformers": row["transformers"],
                "timm": row["timm"],
                "unit": row["unit"],
                "published_definition": row["definition"],
                "under_published_definition": _fmt(_float(row["measured_per_device"]), 5),
                "after_warmup": _fmt(rate, 5),
                "whole_run": _fmt(_float(row["measured_whole_run"]), 5),
                "gaudi_trainer": _fmt(_float(row["measured_gaudi_trainer"]), 5),
                "steps": row["steps"],
                "published_per_device": _fmt(_float(row["reference_per_device"]), 5),
                "published_normalization": row["normalization"],
                "other_devices_published": others.get(row["cell_id"], ""),
                "ratio_per_device": _fmt(_float(row["ratio_per_device"])),
                "verdict": row["verdict"],
                "speedup": _fmt(_float(row["measured_speedup"])),
                "speedup_over": row["speedup_reference_device"],
                "mfu_precision": precision,
                "achieved_tflops": _fmt(achieved),
                "mfu_datasheet": _fmt(_float(row["mfu"]), 3),
                "peak_tflops_measured": _fmt(measured_peak),
                "mfu_measured_peak": _fmt(
                    achieved / measured_peak if achieved and measured_peak else None, 3
                ),
                "data_wait_share": row["data_wait_share"],
                "compute_share": row["compute_share"],
                "communication_share": row["communication_share"],
                "other_share": row["other_share"],
                "samples_per_joule": _fmt(_float(row["samples_per_joule"])),
                "power_mean_w": row["power_mean_w"],
                "peak_memory_allocator_gib": _fmt(_div(_float(row["peak_memory_bytes"]), GIB)),
                "peak_memory_device_gib": _fmt(_div(peak_device, GIB)),
                "rehearsal_estimate_gib": _fmt(_div(estimate, GIB)),
                "rehearsal_error": _fmt(_off_by(estimate, peak_device), 2),
                "rehearsal_before_gib": _fmt(_div(earlier, GIB)),
                "rehearsal_before_error": _fmt(_off_by(earlier, peak_device), 2),
            }
        )
    return rows


def other_devices(path: Path) -> dict[str, str]:
    """cell id -> the publication's per-device figures for devices other than the one that ran, as the
    report labels them (another device's figure, never a verdict)."""
    found = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("reference") is not None:
            continue
        figures = [
            f"{ref['device']} {ref['value'] / ref['devices']:.4g} per device (of {ref['devices']}, {ref['definition']})"
            for ref in row.get("references") or []
            if ref.get("devices")
        ]
        found[row["cell_id"]] = "; ".join(figures)
    return found


def _div(value: float | None, by: float) -> float | None:
    return None if value is None else value / by


def _off_by(estimate: float | None, measured: float | None) -> float | None:
    """How far an estimate is from what was measured, as a fraction of the measurement."""
    return estimate / measured - 1 if estimate and measured else None


def keep(folder: Path, name: str, runs: dict[str, dict[str, bytes]], into: Path) -> None:
    """The slice's files and its runs' records (`runs`, archive_runs), copied under `into/<slice>/`."""
    target = into / name
    target.mkdir(parents=True, exist_ok=True)
    for file in SLICE_FILES:
        if (folder / file).is_file():
            shutil.copyfile(folder / file, target / file)
    for cell, files in runs.items():
        (target / "runs" / cell).mkdir(parents=True, exist_ok=True)
        for file, data in files.items():
            (target / "runs" / cell / file).write_bytes(data)


def markdown(rows: list[dict[str, str]]) -> str:
    """The README's table: the figures a reader looks for first."""
    head = (
        "| slice | cell | status | samples/s after warm-up | published per device, and the run under its definition | "
        "MFU (measured bf16/tf32/fp32 peak) | data wait | samples/J | peak memory (rehearsal) |"
    )
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        if r["status"] != "ok":
            lines.append(
                f"| {r['slice']} | {r['cell_id']} | {r['status']}: {r['why_not'][:80]} | | | | | | |"
            )
            continue
        published = "-"
        if r["published_per_device"]:
            published = (
                f"{float(r['published_per_device']):.1f} {r['published_definition']}; "
                f"measured {float(r['under_published_definition']):.1f}, {r['verdict']}"
            )
        memory = f"{float(r['peak_memory_device_gib']):.1f} GiB"
        if r["rehearsal_estimate_gib"]:
            memory += f" ({float(r['rehearsal_estimate_gib']):.1f}, {float(r['rehearsal_error']):+.0%}"
            if r["rehearsal_before_gib"]:
                memory += f"; before: {float(r['rehearsal_before_gib']):.1f}, {float(r['rehearsal_before_error']):+.0%}"
            memory += ")"
        mfu = f"{_share(r['mfu_measured_peak'], 0)} {r['mfu_precision']}"
        lines.append(
            f"| {r['slice']} | {r['cell_id']} | ok | {float(r['after_warmup']):.1f} | {published} | "
            f"{mfu} | {_share(r['data_wait_share'], 1)} | {r['samples_per_joule']} | {memory} |"
        )
    return "\n".join(lines) + "\n"


def _share(text: str, digits: int) -> str:
    return "-" if text in ("", None) else f"{float(text):.{digits}%}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.node_results", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("folders", nargs="+", type=Path, help="the slices' --out folders as they came back")
    parser.add_argument(
        "--rehearsal", type=Path, help="the CPU rehearsal's rehearsal.jsonl, for its memory estimates"
    )
    parser.add_argument(
        "--rehearsal-before",
        type=Path,
        help="an earlier rehearsal's rehearsal.jsonl, shown beside (a correction's effect)",
    )
    parser.add_argument(
        "--out", type=Path, default=OUT, help=f"where the tables go (default {OUT.relative_to(ROOT)})"
    )
    args = parser.parse_args(argv)
    estimates = rehearsal_estimates(args.rehearsal)
    before = rehearsal_estimates(args.rehearsal_before)
    for folder in args.folders:
        if not (folder / "checks.json").is_file():
            print(f"error: {folder}: no checks.json, not a slice's --out folder", file=sys.stderr)
            return 2
    # Each folder's checks and archive read once, for its rows and for what is kept of it.
    checks = [json.loads((folder / "checks.json").read_text()) for folder in args.folders]
    slices = [(folder, found["slice"]) for folder, found in zip(args.folders, checks, strict=True)]
    runs = {name: archive_runs(folder / f"node-{name}.tar.gz") for folder, name in slices}
    peaks = measured_peaks(checks)
    rows: list[dict[str, Any]] = []
    for folder, name in slices:
        rows += rows_of(folder, name, runs[name], estimates, peaks, before)
    first = next((r for r in rows if r["status"] == "ok"), None)
    if first is None:
        print("error: no cell completed in the folders given", file=sys.stderr)
        return 2
    date = json.loads((args.folders[0] / "results.jsonl").read_text().splitlines()[0])["started_at"][:10]
    stem = f"{first['device'].replace(' ', '-')}-{date}"
    (args.out / stem).mkdir(parents=True, exist_ok=True)
    with open(args.out / f"{stem}.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    for folder, name in slices:
        keep(folder, name, runs[name], args.out / stem)
    print(markdown(rows))
    print(
        f"{len(rows)} rows: {args.out / (stem + '.csv')}; the slices' files and run records under {args.out / stem}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
