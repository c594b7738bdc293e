"""A cell on a device its publication has no figure for (an H200, a device no recipe names) is shown the
publication's figures for the devices it has, each labelled as another device's, and is judged by
none of them: its verdict stays `no reference`, and it is never refused."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from reprokit.collect import run_row
from reprokit.judge import verdicts
from reprokit.judge.result_row import Row
from reprokit.plan import cells, recipes
from reprokit.report import report, terminal
from tests.conftest import run_inv
from tests.fakes.summaries import complete

# bridgetower's workers2, published on 8 H100s (602.1 samples/s), 8 A100s and 8 Gaudi2s.
H100 = "published h100: 75.26 samples/s per device (another device, not judged)"
A100 = "published a100-80gb: 43.17 samples/s per device (another device, not judged)"
# Gaudi2's figure names the software it was measured on (the recipe's `release`); the GPUs' name none.
GAUDI2_RELEASE = "optimum-habana 1.7.0 (its README: validated for SynapseAI 1.11)"
GAUDI2 = f"published gaudi2: 96.09 samples/s per device (another device, not judged; {GAUDI2_RELEASE})"


def _row(tmp_path: Path, device_name: str) -> Row:
    """workers2 as published (8 devices, real data, every switch in effect) on eight `device_name`s."""
    cell = cells.expand(
        recipes.load("bridgetower"), "bridgetower", "cuda", "published", ["workers2"], devices=8
    )[0]
    run_dir = tmp_path / "session" / "runs" / cell.cell_id
    run_dir.mkdir(parents=True)
    (run_dir / "cell.json").write_text(json.dumps(cell.to_json()))
    (run_dir / "sysinfo.json").write_text(json.dumps({"device_name": device_name, "world_size": 8}))
    throughput = {"after_warmup": {"value": 720.0}, "whole_run": {"value": 640.0}}
    summary = complete(world_size=8, software=dict(cell.software), throughput=throughput)
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_row.row(run_dir)


def _terminal(row: Row) -> str:
    out = io.StringIO()
    terminal.print_table([row], Console(file=out, width=400, color_system=None))
    return out.getvalue()


@pytest.mark.parametrize(("device_name", "key"), [("NVIDIA H200", "h200"), ("NVIDIA B300", None)])
def test_a_session_on_a_device_with_no_figure_shows_the_published_h100_labelled_and_judges_nothing(
    tmp_path, device_name, key
):
    row = _row(tmp_path, device_name)
    # Run as published and measured; nothing published for this device (or a device no recipe names).
    assert (row.device, row.status, row.measured) == (key, "ok", 720.0)
    assert row.verdict == verdicts.NO_REFERENCE and row.reference is None and row.ratio_per_device is None
    page = report.markdown(tmp_path / "session", [row])
    html = report.to_html(tmp_path / "session", [row])
    shown = _terminal(row)
    for text in (page, html, shown):
        for figure in (H100, A100, GAUDI2):
            assert figure in text, (figure, text[-2000:])
    # The summary's and the cell details' "published" say another device's figure; the verdict is none.
    summary = next(line for line in page.splitlines() if line.startswith(f"| {row.cell_id} |"))
    assert H100 in summary and summary.endswith("| no reference |")
    assert f"| published per device | {H100}" in page
    assert "reproduced" not in shown and "slower" not in shown and "faster" not in shown


def test_another_devices_figure_names_the_software_release_it_was_measured_on(tmp_path):
    row = _row(tmp_path, "NVIDIA H200")
    for text in (report.markdown(tmp_path / "session", [row]), _terminal(row)):
        assert f"(another device, not judged; {GAUDI2_RELEASE})" in text
        # A figure that names no release is labelled as before.
        assert H100 in text and "per device (another device, not judged; blog" not in text


def test_a_smoke_cell_on_the_cpu_shows_the_published_figures_labelled_with_their_release(tmp_path):
    cell = cells.expand(recipes.load("bridgetower"), "bridgetower", "cpu", "smoke", ["workers2"])[0]
    run_dir = tmp_path / "session" / "runs" / cell.cell_id
    run_dir.mkdir(parents=True)
    (run_dir / "cell.json").write_text(json.dumps(cell.to_json()))
    (run_dir / "sysinfo.json").write_text(json.dumps({"device_name": "cpu", "world_size": 1}))
    departures = [{"reason": "synthetic data", "kind": "throughput"}]
    summary = complete(world_size=1, departures=departures, throughput={"after_warmup": {"value": 20.0}})
    (run_dir / "summary.json").write_text(json.dumps(summary))
    row = run_row.row(run_dir)
    assert row.verdict == verdicts.NOT_COMPARABLE and row.reference is None
    # One device: the published figure per device, each another device's, Gaudi2's with its release.
    gaudi2 = f"published gaudi2: 96.09 samples/s per device (another device, not judged; {GAUDI2_RELEASE})"
    for text in (report.markdown(tmp_path / "session", [row]), report.to_html(tmp_path / "session", [row])):
        assert gaudi2 in text and "published h100: 75.26 samples/s per device (another device" in text


def test_a_cell_judged_on_its_own_device_shows_no_other_devices_figure(tmp_path):
    row = _row(tmp_path, "NVIDIA H100 80GB HBM3")
    assert row.device == "h100" and row.verdict == verdicts.REPRODUCED
    assert "another device" not in report.markdown(tmp_path / "session", [row])
    assert "another device" not in _terminal(row)


def test_show_on_an_accelerator_with_no_figure_lists_the_others_labelled():
    result = run_inv(
        "show", "bridgetower", "--scale", "smoke", "--accelerator", "cpu", "--variant", "workers2"
    )
    assert result.returncode == 0, result.stderr
    # One device of one smoke cell: the published figure per device, whatever the published count.
    for figure in (H100, A100, GAUDI2):
        assert f"  {figure}\n" in result.stdout
