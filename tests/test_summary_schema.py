"""summary.json is typed by one schema both sides check it against (reprokit_trainers/summary.schema.json):
a trainer refuses to write a summary the schema refuses, and the host reads one as an unreadable cell,
each in one line naming the file and the field."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reprokit.collect import collect
from reprokit.contract import bounded, records, rundirs, trainers
from reprokit_trainers.common.record import summaryschema
from tests.conftest import ROOT
from tests.fakes.sessions import CELLS, FIXTURE, write_session

SCHEMA = summaryschema.load()
PACKAGE = ROOT / "scripts" / "reprokit_trainers"
# Each way a summary breaks the schema, and the field its one line names.
BROKEN = {
    "an unknown field": ({"samples_per_watt": 3.0}, None, "field `samples_per_watt` is not declared in summary.schema.json"),
    "a missing required field": ({}, "steps", "required field `steps` is missing"),
    "a wrong type": ({"world_size": "one"}, None, "field `world_size` is \"one\", not an integer"),
    "a wrong nested type": ({"departures": [{"reason": "synthetic data", "kind": "speed"}]}, None,
                            "field `departures[0].kind` is \"speed\", not one of throughput, quality"),
}  # fmt: skip


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict:
    """A summary as a trainer writes it: a meter's steps, a departure and a switch, through RunDir."""
    pytest.importorskip("torch")
    from reprokit_trainers.common.measure.meter import ThroughputMeter
    from reprokit_trainers.common.record.rundir import THROUGHPUT, RunDir

    folder = tmp_path_factory.mktemp("run")
    meter = ThroughputMeter(warmup_steps=1, total_steps=3)
    for _ in range(3):
        meter.step_end(4, boundary=True)
    run_dir = RunDir(folder)
    run_dir.depart("synthetic data", THROUGHPUT)
    run_dir.write_summary(meter, loader="torch", torch_compile=False)
    return json.loads((folder / "summary.json").read_text())


def broken(summary: dict, how: str) -> dict:
    changes, dropped, _ = BROKEN[how]
    found = {**summary, **changes}
    found.pop(dropped, None)
    return found


def test_the_schema_declares_every_field_and_the_validator_reads_it_as_jsonschema_does(written):
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    strict = jsonschema.Draft202012Validator(SCHEMA)
    failed = {**{k: v for k, v in written.items() if k in ("schema_version", "finished_at")},
              "status": "failed", "exit_code": 1, "error": "boom", "log_tail": ["boom"]}  # fmt: skip
    cases = {
        "as written": written,
        "not finite": {**written, "samples_per_second": math.nan},
        "failed": failed,
        "failed without its error": {k: v for k, v in failed.items() if k != "error"},
        "ok without its figures": {k: v for k, v in written.items() if k != "throughput"},
        **{how: broken(written, how) for how in BROKEN},
    }
    for name, case in cases.items():
        assert bool(summaryschema.problems(case, SCHEMA)) == bool(list(strict.iter_errors(case))), name
    assert summaryschema.problems(written, SCHEMA) == [] and summaryschema.problems(failed, SCHEMA) == []


def test_a_hostile_field_name_is_shown_on_one_line_that_moves_no_terminal(written):
    hostile = {**written, "x\n\x1b[2Jy" + "z" * 200: 1}
    (reason,) = summaryschema.problems(hostile, SCHEMA)
    assert "\n" not in reason and "\x1b" not in reason and len(reason) < 120
    assert reason.startswith("field `x\\n\\u001b[2Jy")


def test_a_schema_keyword_the_validator_does_not_read_is_refused_not_ignored():
    with pytest.raises(summaryschema.SchemaError, match="pattern"):
        summaryschema.problems({"unit": "x"}, {"properties": {"unit": {"type": "string", "pattern": "^img"}}})


def test_the_contract_names_the_schema_and_the_host_loads_the_same_file():
    assert trainers.contract()["summary_schema"] == summaryschema.SCHEMA_FILE
    assert trainers.summary_schema() == SCHEMA
    assert trainers.contract()["schema_version"] >= summaryschema.TYPED_FROM


# --- the trainers' side -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"samples_per_watt": 3.0}, BROKEN["an unknown field"][2]),
        ({"loader": 3}, "field `loader` is 3, not text"),
    ],
)
def test_a_trainer_refuses_a_summary_the_schema_refuses_in_one_line_and_keeps_what_it_measured(
    tmp_path, extra, reason
):
    pytest.importorskip("torch")
    from reprokit_trainers.common.measure.meter import ThroughputMeter
    from reprokit_trainers.common.record.rundir import RunDir, SummaryRejected

    meter = ThroughputMeter(warmup_steps=1, total_steps=2)
    meter.step_end(4, boundary=True)
    meter.step_end(4, boundary=True)
    with pytest.raises(SummaryRejected) as refused:
        RunDir(tmp_path).write_summary(meter, **extra)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"summary.json: {reason}")
    assert "summary.rejected.json" in message
    assert not (tmp_path / "summary.json").exists()  # no summary: the host sees a run that failed
    kept = json.loads((tmp_path / "summary.rejected.json").read_text())
    assert kept["steps"] == 2 and kept["throughput"]["after_warmup"]["samples"] == 4


@pytest.mark.parametrize("how", sorted(BROKEN))
def test_the_trainers_check_names_the_field_of_each_break(written, how):
    pytest.importorskip("torch")
    from reprokit_trainers.common.record.rundir import SummaryRejected, check_summary

    assert check_summary(written) == written
    with pytest.raises(SummaryRejected) as refused:
        check_summary(broken(written, how))
    assert str(refused.value) == f"summary.json: {BROKEN[how][2]}"


def test_a_trainer_process_that_writes_a_bad_summary_ends_in_one_line_without_a_traceback(tmp_path):
    pytest.importorskip("torch")
    script = (
        "import sys\n"
        "from reprokit_trainers.common.measure.meter import ThroughputMeter\n"
        "from reprokit_trainers.common.record.rundir import RunDir\n"
        "meter = ThroughputMeter(warmup_steps=0, total_steps=1)\n"
        "meter.step_end(2, boundary=True)\n"
        "RunDir(sys.argv[1]).write_summary(meter, samples_per_watt=3.0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "scripts"), "REPROKIT_WATCH_LOAD": "0"},
        timeout=300,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"summary.json: {BROKEN['an unknown field'][2]}")


# --- the host's side ----------------------------------------------------------------------------


def _session_with(tmp_path: Path, summary: dict) -> tuple[Path, Path]:
    """A session whose first cell's summary.json is ``summary``; (the session, that summary's path)."""
    session = write_session(tmp_path / "20250102-030405", "2025-01-02T03:04:05+00:00", collect=False)
    path = session / "runs" / CELLS[0] / "summary.json"
    path.write_text(json.dumps(summary))
    return session, path


@pytest.mark.parametrize("how", sorted(BROKEN))
def test_the_host_reads_a_summary_the_schema_refuses_as_an_unreadable_cell_naming_the_file_and_field(
    tmp_path, written, how
):
    session, path = _session_with(tmp_path, broken(written, how))
    with pytest.raises(bounded.Malformed) as refused:
        records.read(path.parent)
    assert str(refused.value) == f"{path}: {BROKEN[how][2]}"
    found = collect.collect(session)
    rows = {r.cell_id: r for r in found.rows}
    assert rows[CELLS[0]].status == "unreadable" and rows[CELLS[1]].status == "ok"
    assert rows[CELLS[0]].error == f"runs/{CELLS[0]}/summary.json: {BROKEN[how][2]}"
    assert found.skipped_lines() == [f"skipped: {path}: {BROKEN[how][2]}"]


def test_the_host_reads_a_summary_a_trainer_wrote_as_typed(tmp_path, written):
    _, path = _session_with(tmp_path, written)
    record = records.read(path.parent)
    assert record.status == "ok" and record.summary.steps == written["steps"]
    assert [d.reason for d in record.summary.departures] == ["synthetic data"]


def test_a_summary_from_before_the_schema_is_read_as_it_was_written(tmp_path):
    # Contract version 3 had no schema: a field the kit never declared is kept, as it always was.
    old = json.loads((FIXTURE / "runs" / CELLS[0] / "summary.json").read_text())
    assert old["schema_version"] == 3
    _, path = _session_with(tmp_path, {**old, "samples_per_watt": 3.0})
    assert records.read(path.parent).status == "ok"


@pytest.mark.parametrize("how", ["failed", "skipped"])
def test_a_summary_the_host_writes_for_a_run_that_did_not_complete_is_typed(tmp_path, how):
    written = rundirs.finish(tmp_path, 1) if how == "failed" else rundirs.skip(tmp_path, "needs x")
    assert written["schema_version"] == trainers.contract()["schema_version"]
    assert summaryschema.problems(written, SCHEMA) == []
    assert trainers.summary_problem(json.loads((tmp_path / "summary.json").read_text())) is None
