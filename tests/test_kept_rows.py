"""Nothing measured is lost to a collect: a session copied without its runs/ folder, a cell whose run
directory was removed, or a run file another program broke keeps the row its last collect stored (its
figure, verdict and provenance) in results.csv, results.jsonl, the report and history, each saying why
it was not read again (`kept`), instead of becoming `not started` or `unreadable`; a results.jsonl that
cannot be read is set aside before it is replaced, and one that is a folder stops the collect in one
line before anything is written."""

from __future__ import annotations

import csv
import json
import shutil

import pytest
from invoke import Context, Exit

from reprokit.cli import result_tasks
from reprokit.collect import collect
from reprokit.report import history, history_tables
from tests.fakes.sessions import CELLS, FIXTURE, edit_json, write_session
from tests.fixtures.make_results_session import collected

KEPT = "the row stored by the last collect is kept"


@pytest.fixture
def results(tmp_path):
    folder = tmp_path / "results"
    write_session(folder / "s", "2025-01-01T10:00:00+00:00")
    return folder


def _jsonl(session) -> dict[str, dict]:
    return {r["cell_id"]: r for r in map(json.loads, (session / "results.jsonl").read_text().splitlines())}


def _csv(session) -> dict[str, dict]:
    with open(session / "results.csv", newline="") as fh:
        return {r["cell_id"]: r for r in csv.DictReader(fh)}


def test_a_report_of_a_session_without_its_runs_keeps_the_measured_rows(results, capsys):
    session = results / "s"
    before = _jsonl(session)
    assert {c: r["measured"] for c, r in before.items()} == {CELLS[0]: 43.0, CELLS[1]: 74.0}
    shutil.rmtree(session / "runs")  # a session copied without its run directories
    for _ in range(2):  # and again: a kept row stays kept while its runs are away
        result_tasks.report(Context(), "s", results=str(results))
        out, err = capsys.readouterr()
        after = _jsonl(session)
        assert {c: (r["status"], r["measured"], r["verdict"]) for c, r in after.items()} == {
            c: (r["status"], r["measured"], r["verdict"]) for c, r in before.items()
        }
        assert [r["provenance"] for r in after.values()] == [r["provenance"] for r in before.values()]
        assert {c: r["kept"] for c, r in after.items()} == {c: f"runs/ is gone: {KEPT}" for c in CELLS}
        assert err.splitlines() == [f"kept: {c}: runs/ is gone: {KEPT}" for c in CELLS]  # once per cell
        rows = _csv(session)
        assert rows[CELLS[0]]["measured"] == "43.0" and rows[CELLS[0]]["kept"] == f"runs/ is gone: {KEPT}"
        assert "not started" not in out and f"kept {CELLS[0]}: runs/ is gone" in out
        assert "## Rows kept from the last collect" in (session / "report.md").read_text()
    # history still finds the session, and its JSON says which rows were kept.
    found = history.read(results)
    assert [e.row.measured for e in found.rows] == [43.0, 74.0] and found.skipped == []
    assert {r["kept"] for r in history_tables.to_json(results, found)["rows"]} == {f"runs/ is gone: {KEPT}"}
    # The run directories back: read again, nothing kept.
    shutil.copytree(FIXTURE / "runs" / CELLS[0], session / "runs" / CELLS[0])
    shutil.copytree(FIXTURE / "runs" / CELLS[1], session / "runs" / CELLS[1])
    found = collect.collect(session)
    assert [(r.status, r.kept) for r in found.rows] == [("ok", None), ("ok", None)]
    assert collect.kept_lines(found.rows) == []


@pytest.mark.parametrize(
    "file, damage, reason",
    [
        ("summary.json", "garbage", "not JSON (line 1 column 1: Expecting value)"),
        ("cell.json", {"devices": "eight"}, "devices is 'eight': input should be a valid integer"),
    ],
)
def test_a_cell_whose_run_file_becomes_unreadable_keeps_its_stored_figure_and_names_the_file(
    results, capsys, file, damage, reason
):
    session = results / "s"
    path = session / "runs" / CELLS[0] / file
    if isinstance(damage, dict):  # a cell.json of another schema
        edit_json(path, damage)
    else:
        path.write_text(damage)
    result_tasks.collect(Context(), "s", results=str(results))
    err = capsys.readouterr().err.splitlines()
    (skipped,) = [e for e in err if e.startswith("skipped: ")]
    assert skipped.startswith(f"skipped: {path}: {reason}")
    (kept,) = [e for e in err if e.startswith("kept: ")]
    assert kept.startswith(f"kept: {CELLS[0]}: runs/{CELLS[0]}/{file}: {reason}") and kept.endswith(KEPT)
    rows = _jsonl(session)
    assert (rows[CELLS[0]]["status"], rows[CELLS[0]]["measured"]) == ("ok", 43.0)  # was `unreadable`, None
    assert rows[CELLS[1]]["kept"] is None  # the other cell read afresh


def test_a_series_with_a_run_gone_keeps_its_median_and_kept_rows_take_part_in_the_ratios(tmp_path):
    session = collected(tmp_path)  # a baseline, a cell run three times, speedups, two-node scaling
    before = _jsonl(session)
    shutil.rmtree(session / "runs" / "bridgetower--workers1--r2")
    collect.collect(session)
    after = _jsonl(session)
    series = after.pop("bridgetower--workers1")
    assert series["kept"] == f"runs/bridgetower--workers1--r2 is gone: {KEPT}"
    assert {**series, "kept": None} == before.pop("bridgetower--workers1")  # median of 3, not of 2
    assert after == before  # the other rows read afresh, as before
    shutil.rmtree(session / "runs")
    collect.collect(session)
    kept = _jsonl(session)
    never = "bridgetower--workers2-gpu-decode-fused"
    assert kept[never]["status"] == "not started" and kept[never]["kept"] is None  # never measured
    for cell, row in before.items():
        if cell != never:
            # Every figure, speedup and scaling efficiency as measured: computed again over kept rows.
            assert {**kept[cell], "kept": None} == row, cell
    assert kept["volo--pretrain-d5--2n"]["scaling_efficiency"] is not None


def test_a_results_jsonl_that_cannot_be_read_is_set_aside_before_a_collect_replaces_it(results, capsys):
    session = results / "s"
    shutil.rmtree(session / "runs")
    stored = (session / "results.jsonl").read_bytes()
    broken = stored[: len(stored) // 2]  # cut short by another program: the only copy of the figures
    (session / "results.jsonl").write_bytes(broken)
    result_tasks.collect(Context(), "s", results=str(results))
    err = capsys.readouterr().err.strip()
    assert err == (
        f"skipped: {session / 'results.jsonl'}: truncated at line 1; set aside as results.jsonl.unreadable-1, "
        "the rows rebuilt from runs/"
    )
    assert (session / "results.jsonl.unreadable-1").read_bytes() == broken
    assert {r["status"] for r in _jsonl(session).values()} == {"not started"}  # nothing to keep


def test_a_report_of_a_session_whose_results_jsonl_is_a_folder_is_one_line_and_writes_nothing(results):
    session = results / "s"
    kept = (session / "results.csv").read_bytes()
    (session / "results.jsonl").unlink()
    (session / "results.jsonl").mkdir()
    with pytest.raises(Exit) as stopped:
        result_tasks.report(Context(), str(session), results=str(results))
    assert stopped.value.code != 0 and stopped.value.message == (
        f"reprokit: {session / 'results.jsonl'} is a folder, not a file: nothing was written; "
        "move it away, then run this again"
    )
    assert (session / "results.csv").read_bytes() == kept and not (session / "report.md").exists()


def test_an_export_of_a_session_without_its_runs_logs_each_kept_row_with_its_stored_figure(results, capsys):
    mlflow = pytest.importorskip("mlflow.tracking")
    session = results / "s"
    shutil.rmtree(session / "runs")
    result_tasks.export_results(Context(), "s", results=str(results))
    out, err = capsys.readouterr()
    assert out.startswith("3 runs logged"), out
    said = [text for text in err.splitlines() if text.startswith("kept: ")]  # MLflow logs its own lines
    assert said == [f"kept: {c}: runs/ is gone: {KEPT}" for c in CELLS]
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{results.resolve() / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("reprokit")
    runs = {r.data.tags["reprokit.cell"]: r for r in client.search_runs([experiment.experiment_id])}
    assert {c: runs[c].data.metrics["result.measured"] for c in CELLS} == {CELLS[0]: 43.0, CELLS[1]: 74.0}
    assert {runs[c].data.tags["reprokit.kept"] for c in CELLS} == {f"runs/ is gone: {KEPT}"}
