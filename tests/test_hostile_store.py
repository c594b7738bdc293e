"""One bad file cannot break the store: a session whose file is dated year 1, nested 100,000 deep, of
another schema or a link out of the results folder is skipped for itself alone, said in one line
(`skipped: <path>: <reason>`), while history, compare, report, collect and export go on with the
others; and text from run files reaches the terminal, Markdown, MLflow and matplotlib as text."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from invoke import Context, Exit

from reprokit.cli import result_tasks
from reprokit.collect import collect
from reprokit.contract.textsafe import NAME
from reprokit.report import history, report
from tests.fakes.sessions import CELLS, edit_json, write_session

GOOD = ("a", "b")
ESC = "\x1b"


@pytest.fixture
def results(tmp_path):
    """Two good sessions, a day apart, and room beside them for bad ones."""
    folder = tmp_path / "results"
    write_session(folder / "a", "2025-01-01T10:00:00+00:00")
    write_session(folder / "b", "2025-01-02T10:00:00+00:00", rate=1.01)
    return folder


def _bad(results, name: str = "bad", created_at: str = "2024-12-31T10:00:00+00:00", **kwargs):
    """A third session, older than the good ones (so latest and previous are the good two)."""
    return write_session(results / name, created_at, **kwargs)


def _history(results, capsys) -> tuple[list[str], list[str]]:
    """`inv history all`: the sessions it lists, and its stderr's lines."""
    result_tasks.history(Context(), "all", results=str(results))
    out, err = capsys.readouterr()
    listed = [line.split()[0] for line in out.splitlines() if "bridgetower--" in line]
    return listed, err.strip().splitlines()


def _everything_reads_beside(results, bad_path, reason, capsys) -> None:
    """history lists the good sessions and names the bad file; compare of the defaults (previous and
    latest) and report latest work; report and collect of the bad session finish."""
    listed, err = _history(results, capsys)
    assert set(listed) == set(GOOD)
    assert f"skipped: {bad_path}: {reason}" in err
    result_tasks.compare(Context(), results=str(results), noise="5")
    out = capsys.readouterr().out
    assert "A = a, B = b" in out and "same" in out
    result_tasks.report(Context(), "latest", results=str(results))
    assert (results / "b" / "report.md").exists() and "bridgetower--workers0" in capsys.readouterr().out


# --- 3. dates ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["0001-01-01T00:00:00", "9999-12-31T23:59:59+00:00", "1969-07-20T20:17:40Z"]
)
def test_a_session_dated_outside_any_run_is_skipped_and_the_folder_still_reads(results, capsys, value):
    bad = _bad(results)
    edit_json(bad / "session.json", {"created_at": value})
    _everything_reads_beside(
        results, bad / "session.json", f"created_at {value!r} is not a time a run had (1970 to 2200)", capsys
    )


def test_a_cell_started_in_year_9999_is_unreadable_for_itself_alone(results, capsys):
    bad = _bad(results, collect=False)
    sysinfo = bad / "runs" / CELLS[0] / "sysinfo.json"
    edit_json(sysinfo, {"started_at": "9999-12-31T23:59:59+00:00"})
    found = collect.collect(bad)
    reason = "started_at '9999-12-31T23:59:59+00:00' is not a time a run had (1970 to 2200)"
    assert found.skipped_lines() == [f"skipped: {sysinfo}: {reason}"]
    rows = {r.cell_id: r for r in found.rows}
    assert rows[CELLS[0]].status == "unreadable" and rows[CELLS[0]].verdict == "no result"
    assert rows[CELLS[0]].error == f"runs/{CELLS[0]}/sysinfo.json: {reason}"
    assert rows[CELLS[1]].status == "ok" and rows[CELLS[1]].measured is not None
    # A results.jsonl an older kit wrote with that date: the session is skipped, the others read.
    path = bad / "results.jsonl"
    path.write_text(
        path.read_text().replace('"started_at": null', '"started_at": "9999-12-31T23:59:59+00:00"', 1)
    )
    _everything_reads_beside(
        results, path, "line 1: started_at '9999-12-31T23:59:59+00:00' is not a time a run had (1970 to 2200)",
        capsys,
    )  # fmt: skip


def test_history_json_lists_each_session_it_skipped_with_its_file_and_reason(results, capsys):
    jsonschema = pytest.importorskip("jsonschema")
    from reprokit import schemas

    bad = _bad(results)
    edit_json(bad / "session.json", {"created_at": "0001-01-01T00:00:00"})
    result_tasks.history(Context(), "all", results=str(results), json_=True)
    found = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator(schemas.schema("history")).validate(found)
    assert found["skipped"] == [
        {"path": str(bad / "session.json"),
         "reason": "created_at '0001-01-01T00:00:00' is not a time a run had (1970 to 2200)"}
    ]  # fmt: skip
    assert {r["session"] for r in found["rows"]} == set(GOOD)


# --- 4. depth ------------------------------------------------------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("where", ["session.json", "summary.json", "results.jsonl"])
def test_a_file_nested_100000_deep_is_skipped_for_its_session_alone(results, capsys, where):
    bad = _bad(results, collect=where != "summary.json")  # a cell never collected: no stored row to keep
    if where == "session.json":
        path = bad / "session.json"
        path.write_text(
            json.dumps({"created_at": "2024-12-31T10:00:00+00:00", "cells": []})[:-1] + f', "x": {DEEP}}}'
        )
    elif where == "summary.json":
        path = bad / "runs" / CELLS[0] / "summary.json"
        path.write_text(path.read_text()[:-1] + f', "x": {DEEP}}}')
        found = collect.collect(bad)  # the other cell is collected, this one named
        assert found.skipped_lines() == [f"skipped: {path}: nested deeper than 64 levels"]
        assert [r.status for r in found.rows] == ["unreadable", "ok"]
        path = bad / "results.jsonl"
        path.write_text(DEEP + "\n" + path.read_text())
        where = "results.jsonl"
    else:
        path = bad / "results.jsonl"
        path.write_text(path.read_text() + DEEP + "\n")
    reason = (
        "nested deeper than 64 levels" if where == "session.json" else re.compile(r"line \d+: nested deeper")
    )
    listed, err = _history(results, capsys)
    assert set(listed) == set(GOOD)
    (line,) = [e for e in err if e.startswith(f"skipped: {path}: ")]
    assert line == f"skipped: {path}: {reason}" if isinstance(reason, str) else reason.search(line)
    result_tasks.report(Context(), "bad", results=str(results))  # finishes: the run directories are read
    result_tasks.compare(Context(), results=str(results), noise="5")


def test_a_results_jsonl_nested_100000_deep_on_its_last_line_says_so_and_a_line_cut_short_is_truncated(
    results, capsys
):
    bad = _bad(results)
    path = bad / "results.jsonl"
    rows = path.read_text()
    path.write_text(rows + DEEP)  # the last line, without its newline: complete, and too deep
    listed, err = _history(results, capsys)
    assert set(listed) == set(GOOD)
    assert f"skipped: {path}: line 3: nested deeper than 64 levels" in err  # before: truncated at line 3
    path.write_text(rows + rows[: len(rows) // 4])  # a last line really cut short
    assert f"skipped: {path}: truncated at line 3" in _history(results, capsys)[1]


# --- 5. math text ----------------------------------------------------------------------------------


def test_a_device_named_like_math_text_is_drawn_as_its_name(results, capsys):
    for name in GOOD:
        for cell in CELLS:
            edit_json(
                results / name / "runs" / cell / "sysinfo.json",
                {"device_name": "$\\foo{$", "hostname": "$x^$"},
            )
        collect.collect(results / name)
    written = report.write(results / "b")
    assert {p.name for p in written.plots} >= {"throughput-bridgetower.png"}
    found = history.read(results)
    page = history.write(results, found.rows)
    assert page.read_text().count("data:image/png;base64,") == 2


# --- 6. another schema -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cells, reason",
    [
        ("abc", "cells is 'abc': input should be a valid list"),
        (
            [{"id": "bridgetower--workers0"}],
            "cells.0.cell_id is {'id': 'bridgetower--workers0'}: field required",
        ),
        ([7], "cells.0 is 7: input should be a valid dictionary or instance of plannedcell"),
    ],
)
def test_a_session_json_of_another_schema_still_reports_from_its_run_directories(
    results, capsys, cells, reason
):
    bad = _bad(results)
    edit_json(bad / "session.json", {"cells": cells})
    written = report.write(bad)
    assert [s.skipped() for s in written.skipped] == [f"skipped: {bad / 'session.json'}: {reason}"]
    assert sorted(r.cell_id for r in written.table) == sorted(CELLS)
    listed, err = _history(results, capsys)
    assert set(listed) == set(GOOD) and f"skipped: {bad / 'session.json'}: {reason}" in err


def test_a_summary_of_another_schema_is_an_unreadable_cell_and_the_report_goes_on(results, capsys):
    bad = _bad(results, collect=False)  # never collected: no row stored to keep (test_kept_rows.py)
    summary = bad / "runs" / CELLS[0] / "summary.json"
    edit_json(summary, {"schema_version": "three"})
    result_tasks.report(Context(), "bad", results=str(results))
    out, err = capsys.readouterr()
    reason = (
        "schema_version is 'three': input should be a valid integer, unable to parse string as an integer"
    )
    assert err.strip() == f"skipped: {summary}: {reason}"
    assert (
        "unreadable" in out and f"runs/{CELLS[0]}/summary.json: {reason}" in (bad / "report.md").read_text()
    )


def test_a_garbage_row_in_throughput_csv_leaves_out_that_cells_curves_and_says_so(results, capsys):
    bad = _bad(results)
    curves = bad / "runs" / CELLS[0] / "throughput.csv"
    curves.write_text(curves.read_text() + "x,y,\x00z\n30,200,80.0,2.0\n")
    written = report.write(bad)
    (line,) = [s.skipped() for s in written.skipped]
    assert line.startswith(f"skipped: {curves}: ")
    assert "curves-bridgetower.png" in {p.name for p in written.plots}  # the other cell's curves
    # A curve cut mid-write (a trainer killed) is not garbage: its last row is left out, nothing said.
    curves.write_text("step,steps_total,samples_per_second,loss\n10,200,80.5,2.31\n20,2")
    assert report.write(bad).skipped == []


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400"])
def test_a_step_that_is_not_finite_in_throughput_csv_is_named(results, value):
    bad = _bad(results)
    curves = bad / "runs" / CELLS[0] / "throughput.csv"
    curves.write_text(curves.read_text() + f"{value},200,80.0,2.0\n")
    written = report.write(bad)
    assert [s.skipped() for s in written.skipped] == [
        f"skipped: {curves}: line 4 is not a row of numbers ({value},200,80.0,2.0)"
    ]


# --- 7. folder names --------------------------------------------------------------------------------


def test_a_folder_name_with_a_newline_keeps_its_history_row_on_one_line(results, capsys):
    write_session(results / "two\nlines", "2025-01-03T10:00:00+00:00")
    result_tasks.history(Context(), "all", results=str(results))
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if "bridgetower--" in line]
    assert len(rows) == 6 and sum(line.startswith("two\\nlines ") for line in rows) == 2


def test_a_session_folder_named_in_bytes_that_are_not_utf8_collects_with_its_name_escaped(results, capsys):
    folder = Path(os.fsdecode(os.fsencode(results) + b"/bad\xff"))
    write_session(folder, "2025-01-03T10:00:00+00:00", collect=False)
    # Before: UnicodeEncodeError, its traceback, and no results written.
    result_tasks.collect(Context(), os.fsdecode(folder.name), results=str(results))
    assert "2 cells -> " in capsys.readouterr().out
    assert {json.loads(text)["session"] for text in (folder / "results.jsonl").read_text().splitlines()} == {
        "bad\\xff"
    }


@pytest.mark.parametrize("name", ["it's", 'say "it\'s"'])
def test_a_session_named_with_quotes_exports_and_exports_again_without_duplicates(results, name, capsys):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    write_session(results / name, "2025-01-03T10:00:00+00:00")
    for made in (3, 0):  # before: MLflow's filter-string exception
        result_tasks.export_results(Context(), name, results=str(results))
        assert capsys.readouterr().out.startswith(f"{made} runs logged to sqlite:///")
    client = MlflowClient(tracking_uri=f"sqlite:///{results.resolve() / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("reprokit").experiment_id])
    assert sorted(r.data.tags["reprokit.cell"] for r in runs) == sorted([name, *CELLS])


# --- 8. links ---------------------------------------------------------------------------------------


def test_a_summary_that_links_out_of_the_results_folder_is_not_read(results, tmp_path, capsys):
    secret = tmp_path / "elsewhere.json"
    secret.write_text(json.dumps({"status": "ok", "schema_version": 3, "throughput": {"after_warmup": {"value": 4242.0}},
                                  "error": "SECRET-CONTENT"}))  # fmt: skip
    bad = _bad(results, collect=False)
    summary = bad / "runs" / CELLS[0] / "summary.json"
    summary.unlink()
    summary.symlink_to(secret)
    result_tasks.report(Context(), "bad", results=str(results))
    out, err = capsys.readouterr()
    assert err.strip() == f"skipped: {summary}: a link out of the results folder (to {secret}): not followed"
    for name in ("results.csv", "results.jsonl", "report.md", "report.html"):
        text = (bad / name).read_text()
        assert "4242" not in text and "SECRET-CONTENT" not in text, name
    assert "4242" not in out


def test_a_tensorboard_folder_that_is_a_link_is_replaced_never_followed(results, tmp_path):
    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep" / "file").write_text("not the kit's")
    session = results / "a"
    (session / "runs" / CELLS[0] / "tensorboard" / "throughput").mkdir(parents=True)
    (session / "runs" / CELLS[0] / "tensorboard" / "throughput" / "events.out.tfevents.1.host").write_bytes(
        b"x"
    )
    # A run's own event folder linking out: not copied; the session's tensorboard/ a link: replaced.
    (session / "runs" / CELLS[1] / "tensorboard").symlink_to(outside)
    (session / "tensorboard").symlink_to(outside)
    found = collect.collect(session)
    assert (outside / "keep" / "file").read_text() == "not the kit's"
    assert not (session / "tensorboard").is_symlink()
    assert sorted(p.name for p in (session / "tensorboard").iterdir()) == [CELLS[0]]
    link = session / "runs" / CELLS[1] / "tensorboard"
    assert found.skipped_lines() == [
        f"skipped: {link}: a link out of the results folder (to {outside}): not followed"
    ]


def test_a_session_folder_that_links_out_is_refused_and_nothing_is_written_beside_its_target(
    results, tmp_path
):
    pytest.importorskip("mlflow")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.move(results / "a", elsewhere / "a")
    (results / "linked").symlink_to(elsewhere / "a")
    for task in (result_tasks.export_results, result_tasks.report, result_tasks.collect):
        with pytest.raises(Exit) as refused:
            task(Context(), "linked", results=str(results))
        assert refused.value.message == (
            f"reprokit: {results / 'linked'}: a link out of its results folder {results} "
            f"(to {elsewhere / 'a'}): not followed"
        )
    assert sorted(os.listdir(elsewhere)) == ["a"] and not (elsewhere / "a" / "report.md").exists()
    assert not (results / "mlflow.db").exists()


def test_a_session_folder_named_in_bytes_that_are_not_utf8_reports_with_its_name_escaped(results, capsys):
    # The pages name the session (title, paths, the resume hint) in UTF-8: before, report.md ended in a
    # UnicodeEncodeError traceback.
    folder = write_session(Path(os.fsdecode(os.fsencode(results) + b"/bad\xff")), "2025-01-03T10:00:00+00:00",
                           collect=False)  # fmt: skip
    result_tasks.report(Context(), os.fsdecode(folder.name), results=str(results))
    assert "bridgetower--workers0" in capsys.readouterr().out
    # The byte shown as its escape: in Markdown with its backslash escaped, as Markdown shows one.
    for page, shown in (("report.md", "bad\\\\xff"), ("report.html", "bad\\xff")):
        assert shown in (folder / page).read_text(encoding="utf-8"), page


# --- 9. text for the terminal, Markdown and rich ------------------------------------------------------


def test_control_sequences_and_markup_in_run_files_reach_no_output_raw(results, capsys):
    title = f"{ESC}]0;owned{ESC}\\{ESC}[2J<script>alert(1)</script>"
    hostile = f"cell{ESC}[31m[/]<img src=x onerror=alert(1)>"
    for name in GOOD:
        run_dir = results / name / "runs" / CELLS[1]
        edit_json(run_dir / "cell.json", {"cell_id": hostile, "series_id": hostile})
        edit_json(results / name / "runs" / CELLS[0] / "cell.json", {"title": title})
        edit_json(run_dir / "sysinfo.json", {"hostname": f"host{ESC}[2J"})
        collect.collect(results / name)
    result_tasks.report(Context(), "b", results=str(results))
    result_tasks.history(Context(), "all", results=str(results))
    result_tasks.compare(Context(), results=str(results), noise="5")  # `[/]`: rich's MarkupError before
    out, err = capsys.readouterr()
    assert ESC not in out and ESC not in err
    assert "cell\\x1b[31m[/]<img src=x onerror=alert(1)>" in out
    md = (results / "b" / "report.md").read_text()
    assert ESC not in md and "<script>" not in md and "<img" not in md
    assert "&lt;script&gt;" in md and "cell\\\\x1b\\[31m\\[/\\]&lt;img src=x onerror=alert(1)&gt;" in md
    html = (results / "b" / "report.html").read_text()
    assert "<script>" not in html and "<img src=x" not in html


def test_a_recipes_words_reach_the_terminal_as_text(tmp_path, capsys):
    import yaml

    from reprokit.cli import tasks
    from tests.conftest import ROOT

    data = yaml.safe_load((ROOT / "recipes" / "bridgetower" / "recipe.yaml").read_text())
    data.update(name="hostile", title=f"Hostile{ESC}]0;owned{ESC}\\ recipe{ESC}[2J",
                notes=[f"beware{ESC}[31m"])  # fmt: skip
    for variant in data["variants"]:
        variant["notes"] = [f"beware{ESC}[31m"]
    folder = tmp_path / "recipes"
    folder.mkdir()
    (folder / "hostile.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    tasks.recipes_(Context(), recipes=[str(folder)])
    tasks.show(Context(), "hostile", recipes=[str(folder)], accelerator="cpu", scale="smoke")
    out = capsys.readouterr().out
    assert ESC not in out
    assert "Hostile\\x1b]0;owned\\x1b\\ recipe\\x1b[2J" in out and "note: beware\\x1b[31m" in out


# --- 10. long text, and controls on pages ---------------------------------------------------------------

LONG = 500_000
TITLE = f"{ESC}]0;TITLE\x07"  # sets a terminal window's title
DEVICE, HOST, CELL = (
    f"{word}{TITLE}" + letter * LONG for word, letter in (("GPU", "d"), ("host", "h"), ("cell", "c"))
)


@pytest.fixture(scope="module")
def long_names(tmp_path_factory):
    """Two sessions; in the second, a device, a host and a cell id of 500,000 characters, each with a window
    title sequence in it (the run files within their size bound: 16 MiB)."""
    results = tmp_path_factory.mktemp("long") / "results"
    write_session(results / "a", "2025-01-01T10:00:00+00:00")
    b = write_session(results / "b", "2025-01-02T10:00:00+00:00", rate=1.01, collect=False)
    for cell in CELLS:
        edit_json(b / "runs" / cell / "sysinfo.json", {"device_name": DEVICE, "hostname": HOST})
    edit_json(b / "runs" / CELLS[1] / "cell.json", {"cell_id": CELL, "series_id": CELL})
    collect.collect(b)
    return results


def _shown_cut(*outputs: str) -> None:
    """No output shows more of the long names than a name's bound, nor their control characters."""
    for said in outputs:
        assert not any(letter * (NAME + 1) in said for letter in "dhc")
        assert ESC not in said and "\x07" not in said


def test_a_report_shows_names_of_500000_characters_cut_and_results_jsonl_keeps_them_whole(long_names, capsys):
    session = long_names / "b"
    result_tasks.report(Context(), "b", results=str(long_names))
    out = capsys.readouterr().out
    md, html = (session / "report.md").read_text(), (session / "report.html").read_text()
    _shown_cut(out, md, html)
    # Cut where shown, saying how long it was (before: a 10.9 MB report.html, a 6 MB plot, 98 s, 6.4 GB).
    assert "GPU\\x1b]0;TITLE\\x07ddd" in html and f"… ({len(DEVICE):,} characters)" in html
    assert len(html) < 300_000 and len(md) < 30_000
    assert all(png.stat().st_size < 200_000 for png in session.glob("*.png"))
    # Its table 140 wide, widened in a log only as far as its cut cell id needs to stay on one line.
    assert len(out) < 20_000 and max(len(text) for text in out.splitlines()) <= 140 + NAME
    rows = {r["series_id"]: r for r in map(json.loads, (session / "results.jsonl").read_text().splitlines())}
    assert rows[CELL]["cell_id"] == CELL and rows[CELL]["device_name"] == DEVICE
    assert rows[CELLS[0]]["provenance"]["hostname"] == HOST


def test_history_shows_names_of_500000_characters_cut_and_its_json_keeps_them_whole(long_names, capsys):
    result_tasks.history(Context(), "all", results=str(long_names))
    out = capsys.readouterr().out
    page = (long_names / "history.html").read_text()
    _shown_cut(out, page)
    assert len(page) < 300_000 and len(out) < 20_000 and max(len(text) for text in out.splitlines()) < 600
    result_tasks.history(Context(), "all", results=str(long_names), json_=True)
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert {r["cell_id"] for r in rows if r["session"] == "b"} == {CELLS[0], CELL}
    assert {(r["device_name"], r["host"]) for r in rows if r["session"] == "b"} == {(DEVICE, HOST)}


def test_compare_shows_names_of_500000_characters_cut_and_its_json_keeps_them_whole(long_names, capsys):
    result_tasks.compare(Context(), results=str(long_names), noise="5")
    out = capsys.readouterr().out
    _shown_cut(out)
    # Folded into its column, the name was 6 MB of table (and `Changed for every cell` did not finish).
    assert (
        "only in B" in out and len(out) < 20_000 and max(len(text) for text in out.splitlines()) <= 200 + NAME
    )
    result_tasks.compare(Context(), results=str(long_names), noise="5", json_=True)
    cells = {c["cell_id"]: c for c in json.loads(capsys.readouterr().out)["cells"]}
    assert CELL in cells
    assert cells[CELLS[0]]["changed"]["device_name"] == ["NVIDIA H100 80GB HBM3", DEVICE]
    assert cells[CELLS[0]]["changed"]["machine"] == ["node-a", HOST]


def test_a_device_or_folder_name_that_retitles_a_terminal_reaches_no_page_raw(results, capsys):
    folder = write_session(results / f"c{TITLE}", "2025-01-03T10:00:00+00:00", collect=False)
    for cell in CELLS:
        edit_json(
            folder / "runs" / cell / "sysinfo.json", {"device_name": f"H100{TITLE}", "hostname": f"n{TITLE}"}
        )
    collect.collect(folder)
    result_tasks.report(Context(), folder.name, results=str(results))
    result_tasks.history(Context(), "all", results=str(results))
    capsys.readouterr()
    for page in (folder / "report.md", folder / "report.html", results / "history.html"):
        text = page.read_text()
        assert ESC not in text and "\x07" not in text, page.name
    for page in (folder / "report.html", results / "history.html"):  # shown, as the terminal shows it
        assert "\\x1b]0;TITLE\\x07" in page.read_text(), page.name
