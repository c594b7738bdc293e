"""Results you can trust: resume after an interrupt, failures recorded and the matrix going on,
rows derived from run directories, and each number judged against its published reference."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reprokit.collect import collect
from reprokit.judge.result_row import COLUMNS
from reprokit.plan.request import Request
from reprokit.run import session, supervise
from reprokit.run.placement import plan
from tests.conftest import INV, ROOT, run_inv
from tests.fakes import FAKES, fake_env, fake_recipe

CPU = ("--accelerator", "cpu", "--runtime", "local")


def _wait_for(predicate, timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@contextlib.contextmanager
def _reproducing(recipe: Path, out: Path) -> Iterator[subprocess.Popen]:
    """`inv reproduce` in its own process group, signalled as a whole like Ctrl-C in a terminal or
    `kill -- -PGID`; killed if the test leaves it running."""
    proc = subprocess.Popen(
        [*INV, "reproduce", str(recipe), *CPU, "--scale", "smoke", "--results", str(out)],
        cwd=ROOT, env={**os.environ, **fake_env()}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        # A fake trainer that ignores SIGTERM outlives a killed kit (its own session) and keeps the
        # machine lock: a failed test must not leave it to hang every later session on this worker.
        # Only a pid that is still the fake trainer: one that ended may be another process's by now.
        for pid_file in out.glob("*/runs/*/fake.pid"):
            with contextlib.suppress(OSError, ValueError):
                pid = int(pid_file.read_text())
                if b"fakes.fake_trainer" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGKILL)


def _stop(proc: subprocess.Popen, sig: int) -> str:
    """Send `sig` to the kit's process group and wait for it to end; its stderr."""
    os.killpg(proc.pid, sig)
    return proc.communicate(timeout=60)[1]


def _csv_rows(path: Path) -> dict[str, dict[str, str]]:
    return {r["cell_id"]: r for r in csv.DictReader(io.StringIO(path.read_text()))}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purpose.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_interrupted_session_is_reported_and_resumes_without_rerunning_complete_cells(tmp_path, sig):
    marker = tmp_path / "hung-once"
    recipe = fake_recipe(
        tmp_path / "fake.yaml",
        [
            {"name": "first", "baseline": True, "args": {"fake_rate": 100}},
            {"name": "second", "args": {"fake_rate": 200, "fake_hang_once": str(marker)}},
            {"name": "third", "args": {"fake_rate": 300}},
        ],
    )
    out = tmp_path / "results"
    with _reproducing(recipe, out) as proc:
        _wait_for(marker.exists, what="the second cell to start")
        (session_dir,) = out.iterdir()
        runs = session_dir / "runs"
        first = runs / "fake--first" / "summary.json"
        kept = (first.read_bytes(), first.stat().st_mtime_ns)
        trainer_pid = int((runs / "fake--second" / "fake.pid").read_text())
        stderr = _stop(proc, sig)
    assert proc.returncode == 130, stderr
    assert "inv resume " in stderr and "Traceback" not in stderr
    # The running cell was stopped with the session (no orphan trainer) and recorded as such.
    assert not _alive(trainer_pid)
    interrupted = json.loads((runs / "fake--second" / "summary.json").read_text())
    assert interrupted["status"] == "interrupted"
    assert not (runs / "fake--third").exists()
    table = _csv_rows(session_dir / "results.csv")
    assert [(r["status"]) for r in table.values()] == ["ok", "interrupted", "not started"]
    # The report too, as at the end of any session (before: results.csv alone), and the table's rows.
    report_md = (session_dir / "report.md").read_text()
    assert "fake--second: interrupted" in report_md and (session_dir / "report.html").is_file()
    assert f"Report: {session_dir.resolve() / 'report.html'}" in stderr.replace("\n", "")

    # --resume alone: the plan (recipe file, accelerator, scale, runtime) comes from session.json.
    resumed = run_inv("resume", session_dir.name, "--results", str(out), env=fake_env())
    assert resumed.returncode == 0, resumed.stderr
    assert "fake--first: complete, not rerun" in resumed.stderr
    assert (first.read_bytes(), first.stat().st_mtime_ns) == kept
    statuses = {c: json.loads((runs / c / "summary.json").read_text())["status"] for c in table}
    assert statuses == {"fake--first": "ok", "fake--second": "ok", "fake--third": "ok"}
    stored = json.loads((session_dir / "session.json").read_text())
    assert [c["cell_id"] for c in stored["cells"]] == list(table)
    assert stored["scale"] == "smoke" and len(stored["resumed_at"]) == 1

    # The table the session wrote is exactly what `inv collect` rebuilds from the run directories.
    written = (session_dir / "results.csv").read_text()
    assert run_inv("collect", str(session_dir)).returncode == 0
    assert (session_dir / "results.csv").read_text() == written
    rows = _csv_rows(session_dir / "results.csv")
    assert [float(r["measured"]) for r in rows.values()] == [100.0, 200.0, 300.0]
    assert float(rows["fake--third"]["measured_speedup"]) == pytest.approx(3.0)


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM], ids=["Ctrl-C", "SIGTERM"])
def test_a_second_ctrl_c_while_the_cell_stops_waits_and_the_cell_is_recorded_interrupted(tmp_path, second):
    """A trainer slow to stop (it ignores SIGTERM: the kit waits 10 s, then SIGKILLs it): the impatient
    user's second Ctrl-C, a second later, must not leave the cell unrecorded (`incomplete`)."""
    recipe = fake_recipe(
        tmp_path / "fake.yaml", [{"name": "slow", "args": {"fake_hang": True, "fake_ignore_term": True}}]
    )
    out = tmp_path / "results"
    with _reproducing(recipe, out) as proc:
        _wait_for(lambda: any(out.glob("*/runs/fake--slow/fake.pid")), what="the trainer to start")
        (session_dir,) = out.iterdir()
        run_dir = session_dir / "runs" / "fake--slow"
        trainer_pid = int((run_dir / "fake.pid").read_text())
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(1.0)
        os.killpg(proc.pid, second)
        stderr = proc.communicate(timeout=60)[1]
    assert proc.returncode == 130, stderr
    assert "Interrupted: stopping the running cell and recording it" in stderr and "Traceback" not in stderr
    assert not _alive(trainer_pid)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["error"] == "interrupted"
    assert _csv_rows(session_dir / "results.csv")["fake--slow"]["status"] == "interrupted"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_kit_stopped_right_after_a_trainer_finished_keeps_the_result(tmp_path, sig):
    """The moment between a trainer's last write (summary.json, ok) and its exit: stopping the kit
    then must not turn a complete measurement into an interrupted one, nor make a resume rerun it."""
    recipe = fake_recipe(
        tmp_path / "fake.yaml",
        [{"name": "done", "baseline": True, "args": {"fake_rate": 123, "fake_linger": 30}}, {"name": "next"}],
    )
    out = tmp_path / "results"
    with _reproducing(recipe, out) as proc:
        _wait_for(lambda: any(out.glob("*/runs/fake--done/summary.json")), what="the trainer's summary")
        stderr = _stop(proc, sig)
    assert proc.returncode == 130, stderr
    (session_dir,) = out.iterdir()
    summary = json.loads((session_dir / "runs" / "fake--done" / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["samples_per_second"] == 123
    resumed = run_inv("resume", str(session_dir), env=fake_env())
    assert resumed.returncode == 0, resumed.stderr
    assert "fake--done: complete, not rerun" in resumed.stderr


def test_resume_refuses_flags_that_would_plan_other_cells(tmp_path):
    recipe = fake_recipe(tmp_path / "fake.yaml", [{"name": "only", "args": {"fake_rate": 10}}])
    out = tmp_path / "results"
    first = run_inv("reproduce", str(recipe), *CPU, "--scale", "smoke", "--results", str(out), env=fake_env())
    assert first.returncode == 0, first.stderr
    (session_dir,) = out.iterdir()
    result = run_inv(
        "reproduce", str(recipe), "--resume", str(session_dir), "--scale", "published", env=fake_env()
    )
    assert result.returncode == 2
    message = result.stderr.strip()
    assert "\n" not in message and "leave out --scale published (the session used smoke)" in message


def test_failed_cells_are_recorded_with_their_log_tail_and_the_matrix_goes_on(tmp_path):
    recipe = fake_recipe(
        tmp_path / "fake.yaml",
        [
            {"name": "good", "baseline": True, "args": {"fake_rate": 100}},
            {"name": "crash", "args": {"fake_crash": "unknown argument --bad_arg"}},
            {"name": "hang", "args": {"fake_hang": True}},
            {"name": "after-crash", "needs": {"resume_from": "crash"}, "args": {"fake_rate": 1}},
            {"name": "also-good", "args": {"fake_rate": 50}},
        ],
    )
    out = tmp_path / "results"
    started = time.monotonic()
    result = run_inv(
        "reproduce", str(recipe), *CPU, "--scale", "smoke", "--results", str(out), "--timeout", "2",
        env=fake_env(),
    )  # fmt: skip
    assert time.monotonic() - started < 30
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert (
        last.startswith("reprokit: 3 of 5 cells did not complete") and "rerun them with: inv resume " in last
    )
    (session_dir,) = out.iterdir()
    runs = session_dir / "runs"
    crash = json.loads((runs / "fake--crash" / "summary.json").read_text())
    assert crash["status"] == "failed" and crash["exit_code"] == 3
    assert crash["error"] == "RuntimeError: unknown argument --bad_arg"
    assert "Traceback (most recent call last):" in crash["log_tail"]
    hang = json.loads((runs / "fake--hang" / "summary.json").read_text())
    assert hang["status"] == "timeout" and not _alive(int((runs / "fake--hang" / "fake.pid").read_text()))
    # The limit it hit and what set it, in its row and in the terminal (before: `timeout` alone).
    assert hang["error"] == "timeout after 2 s (--timeout 2)"
    assert "fake--hang: timeout after 2 s (--timeout 2)" in result.stderr  # the cell's line
    assert "timeout fake--hang: timeout after 2 s (--timeout 2)" in result.stdout  # under the table
    rows = _csv_rows(session_dir / "results.csv")
    assert {c: r["status"] for c, r in rows.items()} == {
        "fake--good": "ok",
        "fake--crash": "failed",
        "fake--hang": "timeout",
        "fake--after-crash": "skipped",
        "fake--also-good": "ok",
    }
    assert rows["fake--crash"]["measured"] == "" and rows["fake--crash"]["verdict"] == "no result"
    assert rows["fake--hang"]["error"] == "timeout after 2 s (--timeout 2)"
    assert float(rows["fake--also-good"]["measured_speedup"]) == pytest.approx(0.5)
    # The log tail reaches the user: in the terminal and in the report.
    assert "RuntimeError: unknown argument --bad_arg" in result.stdout
    report_md = (session_dir / "report.md").read_text()
    assert "## Cells that did not complete" in report_md
    assert "fake--crash: failed: RuntimeError: unknown argument --bad_arg" in report_md
    assert 'File "fake_trainer.py", line 1' in report_md
    jsonl = [json.loads(line) for line in (session_dir / "results.jsonl").read_text().splitlines()]
    assert jsonl[1]["log_tail"][-1] == "RuntimeError: unknown argument --bad_arg"


# ---------------------------------------------------------------------------------------------
# Rows and verdicts, in process (no CLI): the fake trainer reports exactly the rate it is given.


def _run_session(tmp_path: Path, monkeypatch, variants: list[dict], scale: str = "published") -> Path:
    monkeypatch.setenv("REPROKIT_TRAINERS_PATH", str(FAKES.parent))
    recipe = str(fake_recipe(tmp_path / "fake.yaml", variants))
    the_plan = plan(Request(recipes=[recipe], accelerator="cpu", scale=scale, runtime="local"))
    session_dir = session.new_dir(str(tmp_path / "results"))
    request = Request(recipes=[recipe], accelerator="cpu", scale=scale, runtime="local")
    session.save(session_dir, the_plan, request)
    supervise.run_cells(the_plan, session_dir, report_line=lambda cell, outcome: None)
    return session_dir


AW = "after_warmup"
VERDICT_VARIANTS = [
    # Published on 8 devices, run on 1: compared per device (800 / 8 = 100 per device).
    {"name": "base", "baseline": True, "args": {"fake_rate": 95}, "references": [
        {"device": "cpu", "devices": 8, "value": 800, "definition": AW},
        {"device": "gaudi2", "devices": 8, "value": 600, "definition": AW}]},
    {"name": "fast", "args": {"fake_rate": 150}, "references": [
        {"device": "cpu", "devices": 8, "value": 960, "definition": AW},
        {"device": "gaudi2", "devices": 8, "value": 900, "definition": AW}]},
    {"name": "slow", "args": {"fake_rate": 50}, "references": [{"device": "cpu", "devices": 1, "value": 100, "definition": AW}]},
    {"name": "rung", "args": {"fake_rate": 190}, "references": [{"ratio": 2.0, "definition": AW}]},
    {"name": "gaudi-only", "args": {"fake_rate": 120}, "references": [
        {"device": "gaudi2", "devices": 8, "value": 960, "definition": AW}]},
]  # fmt: skip


def test_each_number_is_judged_per_device_against_its_reference_with_the_tolerance(tmp_path, monkeypatch):
    session_dir = _run_session(tmp_path, monkeypatch, VERDICT_VARIANTS)
    rows = {r.variant: r for r in collect.rows(session_dir)}
    base, fast, slow, rung = rows["base"], rows["fast"], rows["slow"], rows["rung"]
    assert base.reference_per_device == 100 and base.ratio_per_device == pytest.approx(0.95)
    assert base.verdict == "reproduced" and base.normalization == "per device (1 vs 8 published)"
    assert fast.ratio_per_device == pytest.approx(1.25) and fast.verdict == "faster"
    assert slow.verdict == "slower" and slow.normalization == "same device count (1)"
    assert rung.verdict == "no reference" and rows["gaudi-only"].verdict == "no reference"
    # Speedups over the baseline measured in this session, against the published ones.
    assert fast.measured_speedup == pytest.approx(150 / 95)
    assert fast.published_speedup == pytest.approx(120 / 100)  # the figures of the device it ran on
    assert fast.speedup_reference_device == "cpu" and fast.speedup_verdict == "faster"
    assert rung.published_speedup == 2.0 and rung.speedup_verdict == "reproduced"
    # No published figure on this device: the ratio comes from the publication's own device.
    gaudi = rows["gaudi-only"]
    assert gaudi.speedup_reference_device == "gaudi2" and gaudi.published_speedup == pytest.approx(1.6)
    assert base.measured_speedup == base.published_speedup == 1.0
    # Provenance: the trainer's start time, versions, image, recipe hash, kit revision.
    assert (
        base.started_at
        == json.loads((session_dir / "runs/fake--base/sysinfo.json").read_text())["started_at"]
    )
    assert base.wall_time_s is not None and base.wall_time_s >= 0
    assert (base.torch, base.transformers, base.timm) == ("2.14.1", "4.49.0", None)
    assert base.image_id.startswith("sha256:") and len(base.recipe_hash) == 12
    assert base.batch_per_device == 48 and base.device_name == "Fake CPU"


def test_smoke_scale_numbers_get_no_verdict(tmp_path, monkeypatch):
    session_dir = _run_session(tmp_path, monkeypatch, VERDICT_VARIANTS[:2], scale="smoke")
    rows = collect.rows(session_dir)
    assert [(r.verdict, r.verdict_reasons) for r in rows] == [("not comparable", "smoke scale")] * 2
    assert all(r.ratio_per_device is None and r.reference_per_device == 100.0 for r in rows[:1])
    assert (rows[1].speedup_verdict, rows[1].speedup_verdict_reasons) == ("not comparable", "smoke scale")


def test_rows_come_from_run_directories_and_planned_cells_that_never_ran_are_listed(tmp_path, monkeypatch):
    session_dir = _run_session(tmp_path, monkeypatch, VERDICT_VARIANTS[:3])
    # A host killed with -9 mid-cell leaves a run directory without summary.json; a cell after it
    # never got one at all.
    import shutil

    shutil.rmtree(session_dir / "runs" / "fake--slow")
    (session_dir / "runs" / "fake--fast" / "summary.json").unlink()
    table = collect.collect(session_dir).rows
    assert [(r.variant, r.status) for r in table] == [
        ("base", "ok"),
        ("fast", "incomplete"),
        ("slow", "not started"),
    ]
    assert table[1].measured is None and table[1].verdict == "no result"
    text = (session_dir / "results.csv").read_text()
    assert text.splitlines()[0].split(",") == COLUMNS and len(text.splitlines()) == 4
    assert not list(session_dir.glob(".*.tmp"))  # written atomically, nothing left half-done


def test_sessions_started_in_the_same_second_get_their_own_folders(tmp_path):
    folders = {session.new_dir(str(tmp_path)) for _ in range(3)}
    assert len(folders) == 3 and all(f.is_dir() for f in folders)
