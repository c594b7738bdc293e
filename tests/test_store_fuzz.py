"""The store under a few hundred malformed sessions: beside two good ones, sessions broken one way each
(types, depths, dates, encodings, links, numbers that are not finite, sizes, folder names, hostile
text, run directories gone, no time recorded, hostile spreads, links planted where the kit writes, names
of hundreds of thousands of characters: tests/fakes/malformed.py), generated from a seed, no trainer run.
history, compare, report, collect and export always finish, show the good sessions, and name every bad
one; a report or collect of a session whose run directories are gone keeps every row it measured; no
control character reaches the terminal or a page, no output shows more of a name than its bound, and
nothing is written through a planted link; compare and its gate never call a range no runs could give
`same` or `improved`. The kit is called in-process (seconds on two cores); one run of
`inv history` as a user runs it checks that no traceback reaches them."""

from __future__ import annotations

import json
import os

import jsonschema
import pytest
from invoke import Context, Exit

from reprokit import schemas
from reprokit.cli import result_tasks
from reprokit.collect import collect, results_folder
from reprokit.contract import bounded
from reprokit.contract.textsafe import NAME, line
from tests.conftest import run_inv
from tests.fakes.malformed import (
    COLLECTED,
    HOSTILE_SPREADS,
    LONG_LETTER,
    REPORTED,
    Breaker,
    Case,
    as_it_stands,
    links_left,
)
from tests.fakes.sessions import CELLS, write_session

SEED = 32
COUNT = 300
LIMIT = 64 * 1024  # the bounded reader's size limit, made small enough to break cheaply


def _shown(path) -> str:
    return line(os.fsdecode(path))


def _call(task, *args, **kwargs) -> str:
    """A result task as a user runs it: what it printed or the one line it stopped with."""
    try:
        task(Context(), *args, **kwargs)
    except Exit as stopped:
        assert stopped.code != 0 and "\n" not in (stopped.message or ""), stopped.message
        return stopped.message or ""
    return ""


def _bounded(*outputs: str) -> bool:
    """Whether no output shows more of a long name than a name's bound (textsafe.NAME), nor a control."""
    return not any(LONG_LETTER * (NAME + 1) in said or "\x1b" in said or "\x07" in said for said in outputs)


def _names(case: Case, said: str) -> bool:
    """Whether `said` names the damaged file, or the session (a session that cannot be found as one)."""
    return f"{_shown(case.path)}: " in said or (
        f"no session {os.fsdecode(case.folder.name)!r}" in said and not case.in_run
    )


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    base = tmp_path_factory.mktemp("fuzz")
    results = base / "results"
    write_session(results / "a", "2025-01-01T10:00:00+00:00")
    write_session(results / "b", "2025-01-02T10:00:00+00:00", rate=1.01)
    template = write_session(base / "template", "2024-12-01T10:00:00+00:00", cells=CELLS[1:])
    cases = Breaker(template, results, base / "outside", SEED).make(COUNT, LIMIT)
    return results, cases


@pytest.fixture(autouse=True)
def small_bounds(monkeypatch):
    monkeypatch.setattr(bounded, "MAX_JSON_BYTES", LIMIT)


def _measured(case: Case) -> dict[str, float | None]:
    """The session's measured rows as its results.jsonl holds them now."""
    rows = [json.loads(text) for text in (case.folder / "results.jsonl").read_text().splitlines()]
    return {r["cell_id"]: r["measured"] for r in rows if r["status"] == "ok"}


def test_history_and_compare_show_the_good_sessions_and_name_every_bad_one(fuzzed, capsys):
    results, cases = fuzzed
    result_tasks.history(Context(), "all", results=str(results))
    out, err = capsys.readouterr()
    listed = {text.split()[0] for text in out.splitlines() if "bridgetower--" in text}
    assert {"a", "b"} <= listed
    session_level = [c for c in cases if not c.in_run and c.expect == "skipped"]
    unplaced = [c for c in cases if c.expect == "unplaced"]
    unnamed = [c.how for c in session_level if f"skipped: {_shown(c.path)}: " not in err]
    assert unnamed == []
    placing = f": {results_folder.UNPLACED}"
    assert [c.how for c in unplaced if f"skipped: {_shown(c.folder)}{placing}" not in err] == []
    assert len(err.splitlines()) == len(session_level) + len(unplaced)  # a line for each, and nothing else
    assert _bounded(out, err, (results / "history.html").read_text())
    said = _call(result_tasks.compare, results=str(results), noise="5")
    out = capsys.readouterr().out
    assert said == "" and "A = a, B = b" in out
    for case in session_level:
        said = _call(result_tasks.compare, a="a", b=os.fsdecode(case.folder.name), results=str(results))
        capsys.readouterr()
        assert _names(case, said), (case.how, said)
    for case in unplaced:  # not placed in time, yet read by its name
        said = _call(result_tasks.compare, a="a", b=case.folder.name, results=str(results), noise="5")
        assert said == "" and f"B = {case.folder.name}" in capsys.readouterr().out, case.how
    for case in [c for c in cases if c.expect == "bounded"]:
        said = _call(
            result_tasks.compare, a="a", b=os.fsdecode(case.folder.name), results=str(results), noise="5"
        )
        out, err = capsys.readouterr()
        assert said == "" and _bounded(out, err), case.how
    assert "\x1b" not in out + err


def test_compare_and_its_gate_never_call_a_hostile_spread_same_or_improved(fuzzed, capsys):
    # Before collect rebuilds the sessions' results.jsonl from their runs (the next test).
    results, cases = fuzzed
    hostile = [c for c in cases if c.kind == "hostile spreads"]
    assert len({c.how.split(": ", 1)[1] for c in hostile}) == len(HOSTILE_SPREADS)  # every way, at least once
    for case in hostile:
        name = os.fsdecode(case.folder.name)
        for a, b in (("a", name), (name, "a")):
            said = _call(result_tasks.compare, a=a, b=b, results=str(results), json_=True, noise="5",
                         fail_on_regression="5", skip_unjudged=True)  # fmt: skip
            found = json.loads(capsys.readouterr().out)
            jsonschema.validate(found, schemas.schema("compare"))
            (cell,) = [c for c in found["cells"] if c["a"] and c["b"]]  # the one cell both sessions hold
            assert (cell["verdict"], cell["energy_verdict"]) == ("not compared", "not compared"), case.how
            side = "A" if a == name else "B"
            assert cell["why"].startswith(f"{side}: "), (case.how, cell["why"])
            # The cell it could judge was this one: passing over the rest, the gate judged nothing.
            assert found["gate"]["judged"] == 0 and not found["gate"]["passed"]
            assert said.startswith("reprokit: the gate judged none of 2 cell(s)"), said


def test_collect_finishes_on_every_session_and_names_every_bad_file(fuzzed, capsys):
    results, cases = fuzzed
    for case in cases:
        said = _call(result_tasks.collect, os.fsdecode(case.folder.name), results=str(results))
        out, err = capsys.readouterr()
        said += out + err
        assert "\x1b" not in said, case.how
        read_by_collect = case.path.name != "throughput.csv"  # the report reads the curves
        if case.expect == "skipped" and (case.in_run or case.path.name == "session.json") and read_by_collect:
            assert _names(case, said), (case.how, said)
        elif case.expect == "not comparable":
            cell = case.path.parent.name
            (row,) = [r for r in collect.rows(case.folder) if r.cell_id == cell]
            assert row.verdict == "not comparable" and "throughput not " in row.verdict_reasons, case.how
        elif case.expect in ("tolerated", "shown", "unplaced", "bounded"):
            assert " cells -> " in said and "skipped:" not in said, (case.how, said)
        elif case.expect == "kept":  # every measured row survives, and says why it was not read again
            assert case.measured and _measured(case) == case.measured, case.how
            assert all(f"kept: {cell}: " in said for cell in case.measured), (case.how, said)
        elif case.expect == "written inside":
            _wrote_nothing_through_a_link(case, COLLECTED)


def _wrote_nothing_through_a_link(case: Case, written: tuple[str, ...]) -> None:
    """What the planted links lead to is as it was; the session's files the kit wrote are its own."""
    assert case.outside is not None and as_it_stands(case.outside) == case.outside_was, case.how
    assert links_left(case, written) == [], case.how


def _one_of_each(cases: list[Case]) -> list[Case]:
    found: dict[str, Case] = {}
    for case in cases:
        if case.folder.is_dir() and (case.folder / "session.json").is_file():
            found.setdefault(case.kind, case)
    return list(found.values())


def test_report_and_export_finish_on_a_session_of_every_kind_and_name_what_they_leave_out(fuzzed, capsys):
    pytest.importorskip("mlflow")
    results, cases = fuzzed
    sample = _one_of_each(cases)
    assert {c.kind for c in sample} >= {
        "wrong type",
        "deep",
        "date",
        "bytes",
        "not finite",
        "text",
        "too large",
        "missing runs",
        "no time",
        "planted",
        "large strings",
    }
    # Every broken throughput.csv too: the report is what reads it (an export of each kind is enough).
    curves = [c for c in cases if c.path.name == "throughput.csv" and c not in sample]
    # A long device, host and cell id in the run files (results.jsonl's are history's and compare's).
    named = {c.how.split()[0]: c for c in cases if c.expect == "bounded" and c.path.name != "results.jsonl"}
    more = [*curves, *(c for c in named.values() if c not in sample)]
    for case in [*sample, *more]:
        name = os.fsdecode(case.folder.name)
        for task in (result_tasks.report, result_tasks.export_results)[: 1 if case in more else 2]:
            said = _call(task, name, results=str(results))
            out, err = capsys.readouterr()
            said += out + err
            assert "\x1b" not in said, case.how
            if case.expect == "skipped" and case.in_run:
                assert _names(case, said), (task.name, case.how, said)
            if case.expect == "kept":
                assert _measured(case) == case.measured, (task.name, case.how)
            if case.expect == "written inside":
                _wrote_nothing_through_a_link(case, REPORTED if task is result_tasks.report else COLLECTED)
        if case.expect == "bounded":
            pages = [(case.folder / name).read_text() for name in ("report.md", "report.html")]
            assert _bounded(said, *pages), case.how
    for good in ("a", "b"):
        assert _call(result_tasks.report, good, results=str(results)) == ""
        assert "bridgetower--workers0" in capsys.readouterr().out


def test_no_traceback_reaches_a_user_of_inv_history(fuzzed):
    results, cases = fuzzed
    shown = run_inv("history", "all", "--results", str(results))
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr[-2000:]
    assert {text.split()[0] for text in shown.stdout.splitlines() if "bridgetower--" in text} >= {"a", "b"}
