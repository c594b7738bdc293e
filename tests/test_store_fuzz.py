"""The store under a few hundred malformed sessions: beside two good ones, sessions broken one way each
(types, depths, dates, encodings, links, numbers that are not finite, sizes, folder names, hostile
text, names of hundreds of thousands of characters: tests/fakes/malformed.py), generated from a seed,
no trainer run. history, compare, report, collect and export always finish, show the good sessions,
and name every bad one; no control character reaches the terminal or a page, and no output shows more
of a name than its bound. The kit is called in-process (seconds on two cores); one run of
`inv history` as a user runs it checks that no traceback reaches them."""

from __future__ import annotations

import os

import pytest
from invoke import Context, Exit

from reprokit.cli import result_tasks
from reprokit.collect import collect
from reprokit.contract import bounded
from reprokit.contract.textsafe import NAME, line
from tests.conftest import run_inv
from tests.fakes.malformed import LONG_LETTER, Breaker, Case
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


def test_history_and_compare_show_the_good_sessions_and_name_every_bad_one(fuzzed, capsys):
    results, cases = fuzzed
    result_tasks.history(Context(), "all", results=str(results))
    out, err = capsys.readouterr()
    listed = {text.split()[0] for text in out.splitlines() if "bridgetower--" in text}
    assert {"a", "b"} <= listed
    session_level = [c for c in cases if not c.in_run and c.expect == "skipped"]
    unnamed = [c.how for c in session_level if f"skipped: {_shown(c.path)}: " not in err]
    assert unnamed == []
    assert len(err.splitlines()) == len(session_level)  # a line for each, and nothing else
    assert _bounded(out, err, (results / "history.html").read_text())
    said = _call(result_tasks.compare, results=str(results), noise="5")
    out = capsys.readouterr().out
    assert said == "" and "A = a, B = b" in out
    for case in session_level:
        said = _call(result_tasks.compare, a="a", b=os.fsdecode(case.folder.name), results=str(results))
        capsys.readouterr()
        assert _names(case, said), (case.how, said)
    for case in [c for c in cases if c.expect == "bounded"]:
        said = _call(
            result_tasks.compare, a="a", b=os.fsdecode(case.folder.name), results=str(results), noise="5"
        )
        out, err = capsys.readouterr()
        assert said == "" and _bounded(out, err), case.how
    assert "\x1b" not in out + err


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
        elif case.expect in ("tolerated", "shown", "bounded"):
            assert " cells -> " in said and "skipped:" not in said, (case.how, said)


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
