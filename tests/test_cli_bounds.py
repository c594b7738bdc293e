"""Flags a user can get wrong, said in one line: a timeout or a repeat count beyond any sensible run,
a tracking URI no MLflow store speaks; and output cut short by `| head` ends quietly."""

from __future__ import annotations

import subprocess
import sys

import pytest
from invoke import Context, Exit

from reprokit.cli import result_tasks, tasks
from tests.conftest import INV, ROOT
from tests.fakes.sessions import write_session


@pytest.mark.parametrize(
    "flags, expected",
    [
        ({"timeout": "315360000"}, "--timeout 315360000: at most 2,592,000 seconds (longer than any published run: "
         "a cell still running after 30 days is stuck)"),
        ({"timeout": "inf"}, "--timeout inf: at most 2,592,000 seconds (longer than any published run: a cell "
         "still running after 30 days is stuck)"),
        ({"timeout": "1e400"}, "--timeout 1e400: at most 2,592,000 seconds (longer than any published run: a cell "
         "still running after 30 days is stuck)"),
        ({"timeout": "nan"}, "--timeout nan: give a number of seconds above 0"),
        ({"repeat": "10000"}, "--repeat 10000: at most 100 (the median of more runs says nothing new, and each run "
         "is the whole cell again)"),
        ({"repeat": "1e20"}, "--repeat 1e20: give how many times to run each cell (a whole number, 1 or more)"),
    ],
)  # fmt: skip
def test_a_timeout_or_repeat_beyond_any_run_is_one_line_with_its_reason(flags, expected):
    with pytest.raises(Exit) as refused:
        tasks.reproduce(Context(), "all", dry_run=True, **flags)
    assert refused.value.message == f"reprokit: {expected}" and refused.value.code == 2


@pytest.mark.parametrize(
    "uri, why",
    [
        ("file:///tmp/mlruns", "MLflow 3 refuses its file store"),
        ("/tmp/mlruns", "MLflow 3 refuses its file store"),
        ("bogus://x", "no MLflow store speaks 'bogus'"),
        ("sqlite://relative.db", None),
    ],
)
def test_a_tracking_uri_no_store_speaks_is_one_line_naming_the_stores_that_work(tmp_path, uri, why):
    pytest.importorskip("mlflow")
    write_session(tmp_path / "results" / "s", "2025-01-01T10:00:00+00:00")
    with pytest.raises(Exit) as refused:  # before: MLflow's own exception, with its traceback
        result_tasks.export_results(Context(), "s", tracking_uri=uri, results=str(tmp_path / "results"))
    if why is None:
        assert (
            refused.value.message
            == f"reprokit: --tracking-uri {uri}: a SQLite store is sqlite:///path/to/mlflow.db"
        )
    else:
        assert refused.value.message == (
            f"reprokit: --tracking-uri {uri}: {why}; give sqlite:///path/to/mlflow.db, or an MLflow server "
            "(http://host:5000)"
        )


@pytest.mark.parametrize("program", [INV, [sys.executable, "-m", "reprokit"]])
@pytest.mark.parametrize("words", [["reproduce", "--help"], ["recipes"]])
def test_output_cut_short_by_head_ends_without_a_traceback(program, words):
    # The reader is gone before the first line is written: every write of the help meets a closed pipe.
    proc = subprocess.Popen([*program, *words], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
