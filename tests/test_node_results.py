"""What a bare GPU node gave becomes one table per device and date: the first H100's own files, kept
under benchmarks/results/gpu/, are read back as they came from the node."""

from __future__ import annotations

import csv
import io
import json
import shutil
import tarfile
from pathlib import Path

from benchmarks import node_results
from tests.conftest import ROOT

KEPT = ROOT / "benchmarks" / "results" / "gpu" / "NVIDIA-H100-80GB-HBM3-2026-11-28"


def as_it_came_back(slice_name: str, where: Path) -> Path:
    """A slice's --out folder as the node returns it: its files and node-<slice>.tar.gz of the session."""
    folder = where / slice_name
    folder.mkdir()
    for file in node_results.SLICE_FILES:
        shutil.copyfile(KEPT / slice_name / file, folder / file)
    with tarfile.open(folder / f"node-{slice_name}.tar.gz", "w:gz") as tar:
        tar.add(KEPT / slice_name / "runs", arcname="session/runs")
    return folder


def test_a_nodes_slices_become_one_row_per_cell_with_its_definitions_peak_and_memory(tmp_path):
    folders = [as_it_came_back(name, tmp_path) for name in ("a", "b")]
    rehearsal = tmp_path / "rehearsal.jsonl"
    rehearsal.write_text(
        json.dumps(
            {"cell_id": "b/bridgetower--workers2", "status": "ok", "memory": {"estimate_bytes": 70 * 2**30}}
        )
        + "\n"
    )
    assert (
        node_results.main([*map(str, folders), "--rehearsal", str(rehearsal), "--out", str(tmp_path / "out")])
        == 0
    )
    rows = {
        (r["slice"], r["cell_id"]): r
        for r in csv.DictReader(
            io.StringIO((tmp_path / "out" / "NVIDIA-H100-80GB-HBM3-2026-11-28.csv").read_text())
        )
    }
    assert len(rows) == 3 + 6
    row = rows[("b", "bridgetower--workers2")]
    assert (row["driver"], row["cuda"], row["torch"]) == ("580.159.04", "13.0", "2.11.0")
    # Every definition the trainer recorded, and the published figure under its own.
    assert float(row["after_warmup"]) > float(row["under_published_definition"]) > 0
    assert row["published_definition"] == "whole_run" and float(row["published_per_device"]) > 0
    # MFU against the bf16 peak the node measured in slice a, not only the datasheet's.
    peak = json.loads((KEPT / "a" / "checks.json").read_text())["matmul"]["tflops"]["bf16"]
    assert float(row["peak_tflops_measured"]) == float(f"{peak:.4g}")
    assert float(row["mfu_measured_peak"]) > float(row["mfu_datasheet"])
    assert abs(float(row["rehearsal_error"]) - (70 / 65.52 - 1)) < 0.01
    timed_out = rows[("b", "bridgetower--workers2-gpu-decode-fused-compile")]
    assert timed_out["status"] == "timeout" and "164 s" in timed_out["why_not"]
    # The runs' own records are kept beside the table.
    assert (
        tmp_path
        / "out"
        / "NVIDIA-H100-80GB-HBM3-2026-11-28"
        / "b"
        / "runs"
        / "bridgetower--workers2"
        / "summary.json"
    ).is_file()


def test_a_folder_that_is_not_a_slices_output_is_refused_in_one_line(tmp_path, capsys):
    assert node_results.main([str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "no checks.json" in capsys.readouterr().err
