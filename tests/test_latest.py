"""`latest` and `previous` mean one thing for every command: the newest sessions by when they recorded
that they started (session.json's created_at, else their runs' first start), never a folder's
modification time, among the sessions whose stored files can be read (those history reads too). A
session passed over is said once, `skipped: <path>: <reason>`; one that recorded no time is left out of
them and of history's order, and is still read by its name."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from invoke import Context

from reprokit.cli import result_tasks
from reprokit.collect import collect, results_folder
from tests.conftest import run_inv
from tests.fakes.sessions import CELLS, edit_json, write_session


def _without_created_at(session, day: str) -> None:
    """A session.json an older tool wrote (no created_at), its runs started on 2025-01-`day`."""
    stored = json.loads((session / "session.json").read_text())
    del stored["created_at"]
    (session / "session.json").write_text(json.dumps(stored))
    for cell in CELLS:
        edit_json(session / "runs" / cell / "sysinfo.json", {"started_at": f"2025-01-{day}T10:00:00+00:00"})
    collect.collect(session)


def test_compare_takes_the_session_that_started_last_as_latest_after_a_report_of_an_older_one(
    tmp_path, capsys
):
    results = tmp_path / "results"
    old = write_session(results / "old", "2025-01-01T10:00:00+00:00", rate=3.0)
    new = write_session(results / "new", "2025-01-02T10:00:00+00:00")
    _without_created_at(old, "01")
    _without_created_at(new, "02")
    result_tasks.report(Context(), "old", results=str(results))  # touches the old session's folder
    os.utime(old, (4_000_000_000, 4_000_000_000))  # and say a backup tool made its mtime the newest
    capsys.readouterr()
    result_tasks.compare(Context(), results=str(results), noise="5")
    out = capsys.readouterr().out
    assert "A = old, B = new" in out  # before: A = new, B = old, and the 3x drop read `3.000 improved`
    (row,) = [text for text in out.splitlines() if f"│ {CELLS[0]}" in text]
    assert "0.333" in row and "regressed" in row
    assert [s.name for s in results_folder.read(results).sessions] == ["old", "new"]  # history's order


def test_a_session_that_recorded_no_time_is_left_out_of_latest_and_history_and_read_by_name(tmp_path, capsys):
    results = tmp_path / "results"
    write_session(results / "a", "2025-01-01T10:00:00+00:00")
    write_session(results / "b", "2025-01-02T10:00:00+00:00")
    loose = write_session(results / "loose", "2025-01-03T10:00:00+00:00", rate=2.0)
    stored = json.loads((loose / "session.json").read_text())
    del stored["created_at"]
    (loose / "session.json").write_text(json.dumps(stored))
    rows = [json.loads(text) for text in (loose / "results.jsonl").read_text().splitlines()]
    (loose / "results.jsonl").write_text("".join(json.dumps({**r, "started_at": None}) + "\n" for r in rows))
    os.utime(loose, (4_000_000_000, 4_000_000_000))  # the newest folder, by its mtime
    result_tasks.compare(Context(), results=str(results), noise="5")
    out, err = capsys.readouterr()
    assert "A = a, B = b" in out  # before: A = b, B = loose (placed by its folder's mtime)
    said = f"skipped: {loose}: {results_folder.UNPLACED}"
    assert err.splitlines() == [said]
    result_tasks.history(Context(), "all", results=str(results))
    out, err = capsys.readouterr()
    assert said in err.splitlines() and "loose" not in out
    result_tasks.compare(Context(), a="b", b="loose", results=str(results), noise="5")
    assert "A = b, B = loose" in capsys.readouterr().out  # by name


def test_a_run_from_a_kit_that_recorded_no_start_is_not_placed_by_its_files_mtime(tmp_path, capsys):
    results = tmp_path / "results"
    write_session(results / "a", "2025-01-01T10:00:00+00:00")
    write_session(results / "b", "2025-01-02T10:00:00+00:00")
    loose = write_session(results / "loose", "2025-01-03T10:00:00+00:00", rate=2.0, collect=False)
    stored = json.loads((loose / "session.json").read_text())
    del stored["created_at"]
    (loose / "session.json").write_text(json.dumps(stored))
    for cell in CELLS:  # an older trainer's files: no start of its own in either
        for name in ("sysinfo.json", "summary.json"):
            found = json.loads((loose / "runs" / cell / name).read_text())
            found.pop("started_at", None)
            (loose / "runs" / cell / name).write_text(json.dumps(found))
            os.utime(loose / "runs" / cell / name, (4_000_000_000, 4_000_000_000))  # copied, unpacked
    collect.collect(loose)
    assert {r["started_at"] for r in map(json.loads, (loose / "results.jsonl").read_text().splitlines())} == {
        None
    }  # before: the files' mtime, which then placed the session last
    capsys.readouterr()
    result_tasks.compare(Context(), results=str(results), noise="5")
    out, err = capsys.readouterr()
    assert "A = a, B = b" in out and err.splitlines() == [f"skipped: {loose}: {results_folder.UNPLACED}"]


@pytest.mark.parametrize("damage", ["a folder", "not JSON", "nested 100,000 deep"])
def test_every_command_that_takes_latest_passes_over_a_session_whose_results_cannot_be_read(
    tmp_path, capsys, damage
):
    results = tmp_path / "results"
    write_session(results / "a", "2025-01-01T10:00:00+00:00")
    b = write_session(results / "b", "2025-01-02T10:00:00+00:00")
    c = write_session(results / "c", "2025-01-03T10:00:00+00:00")  # the newest, its results broken
    path = c / "results.jsonl"
    path.unlink()
    if damage == "a folder":
        path.mkdir()
    else:
        path.write_text("{garbage\n" if damage == "not JSON" else "[" * 100_000 + "]" * 100_000 + "\n")
    result_tasks.history(Context(), "all", results=str(results))
    (said,) = capsys.readouterr().err.splitlines()
    assert said.startswith(f"skipped: {path}: ")
    result_tasks.compare(Context(), results=str(results), noise="5")
    out, err = capsys.readouterr()
    assert "A = a, B = b" in out and err.splitlines() == [said]  # before: compare exited 2 naming it
    report_md = b / "report.md"
    result_tasks.report(Context(), "latest", results=str(results))  # before: c, and EISDIR for a folder
    assert capsys.readouterr().err.splitlines() == [said] and report_md.is_file()
    report_md.unlink()
    result_tasks.collect(Context(), "previous", results=str(results))
    out, err = capsys.readouterr()
    assert err.splitlines() == [said] and f"-> {results / 'a' / 'results.csv'}" in out
    edit_json(b / "session.json", {"devices": 1})  # planned again here, a machine without a GPU
    resumed = run_inv("resume", "latest", "--results", str(results), "--dry-run")
    assert f"# resuming {b.resolve()}" in resumed.stdout and said in resumed.stderr.splitlines()
    assert not report_md.exists() and not (c / "report.md").exists()


def test_latest_is_not_found_when_every_session_is_passed_over_and_each_is_said(tmp_path, capsys):
    results = tmp_path / "results"
    only = write_session(results / "only", "2025-01-01T10:00:00+00:00")
    (only / "results.jsonl").write_text("{garbage\n")
    with pytest.raises(Exception, match="holds 0 session.* 1 left out .*there is no latest one"):
        result_tasks.report(Context(), "latest", results=str(results))
    assert capsys.readouterr().err.startswith(f"skipped: {only / 'results.jsonl'}: ")
    shutil.rmtree(only)
