"""Writes that cannot be redirected: a link (or a file) planted where the kit writes, at a temporary
name it would once have chosen (`.results.jsonl.tmp<pid>`) or at a file's or folder's own name, is
never followed: nothing the kit writes lands outside the folder it writes, nothing outside is
truncated, and the kit's own files are regular files afterwards."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from invoke import Context

from reprokit.cli import result_tasks
from reprokit.contract import files, sessions
from tests.fakes.sessions import CELLS, write_session

NOT_THE_KITS = "not the kit's\n"
# What the atomic writer named its temporary file before (the writer's pid: known to anyone on the machine).
PREDICTABLE = ".{name}.tmp{pid}"


def _outside(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    target.write_text(NOT_THE_KITS)
    return target


def _untouched(outside: Path) -> list[str]:
    """The files under `outside` that are no longer as planted (each held NOT_THE_KITS)."""
    return sorted(str(p) for p in outside.rglob("*") if p.is_file() and p.read_text() != NOT_THE_KITS)


def _plant_temporaries(folder: Path, names: tuple[str, ...], outside: Path) -> list[Path]:
    """A link at the temporary name each of `names` was written through, to a file outside."""
    planted = []
    for name in names:
        link = folder / PREDICTABLE.format(name=name, pid=os.getpid())
        link.symlink_to(_outside(outside, f"tmp-{name}"))
        planted.append(link)
    return planted


@pytest.fixture
def session(tmp_path):
    return write_session(tmp_path / "results" / "s", "2025-01-01T10:00:00+00:00")


def test_a_report_writes_nothing_through_links_planted_at_its_temporary_names(session, tmp_path, capsys):
    outside = tmp_path / "outside"
    names = (sessions.RESULTS_JSONL, sessions.RESULTS_CSV, sessions.REPORT_MD, sessions.REPORT_HTML)
    planted = _plant_temporaries(session, names, outside)
    result_tasks.report(Context(), "s", results=str(session.parent))
    assert "bridgetower--workers0" in capsys.readouterr().out
    assert _untouched(outside) == []
    for name in names:
        assert (session / name).is_file() and not (session / name).is_symlink(), name
    assert all(link.is_symlink() for link in planted)  # left as they were: never opened
    assert "bridgetower--workers0" in (session / sessions.RESULTS_JSONL).read_text()


def test_a_report_replaces_the_links_planted_at_its_own_files_names_never_writing_through_them(
    session, tmp_path
):
    outside = tmp_path / "outside"
    names = (sessions.RESULTS_JSONL, sessions.RESULTS_CSV, sessions.REPORT_MD, sessions.REPORT_HTML)
    for name in names:
        (session / name).unlink(missing_ok=True)
        (session / name).symlink_to(_outside(outside, name))
    result_tasks.report(Context(), "s", results=str(session.parent))
    assert _untouched(outside) == []
    for name in names:
        assert (session / name).is_file() and not (session / name).is_symlink(), name
    shown = [p for p in session.glob("*.png")]
    assert shown and all(p.is_file() and not p.is_symlink() for p in shown)


def test_a_systems_folder_that_links_out_is_replaced_and_nothing_is_written_beside_its_target(
    session, tmp_path
):
    outside = tmp_path / "outside"
    _outside(outside, "keep.json")
    systems = session / "systems"
    for found in systems.iterdir():
        found.unlink()
    systems.rmdir()
    systems.symlink_to(outside, target_is_directory=True)
    result_tasks.collect(Context(), "s", results=str(session.parent))
    assert sorted(p.name for p in outside.iterdir()) == ["keep.json"]
    assert systems.is_dir() and not systems.is_symlink()
    assert [p.suffix for p in systems.iterdir()] == [".json"]


@pytest.mark.parametrize("planted", ["a link to a file outside", "a dangling link", "a file"])
def test_the_atomic_writer_never_opens_what_is_at_a_predictable_temporary_name(tmp_path, planted):
    folder, outside = tmp_path / "folder", tmp_path / "outside"
    folder.mkdir()
    target = folder / "results.csv"
    tmp = folder / PREDICTABLE.format(name=target.name, pid=os.getpid())
    if planted == "a file":
        tmp.write_text(NOT_THE_KITS)
    elif planted == "a dangling link":
        tmp.symlink_to(outside / "made-by-the-kit")
    else:
        tmp.symlink_to(_outside(outside, "file"))
    files.write_text(target, "measured\n")
    assert target.read_text() == "measured\n" and not target.is_symlink()
    assert not (outside / "made-by-the-kit").exists() and _untouched(outside) == []
    assert tmp.is_symlink() or tmp.read_text() == NOT_THE_KITS
    assert sorted(p.name for p in folder.iterdir()) == sorted([target.name, tmp.name])  # no temporary left


def test_the_atomic_writer_replaces_a_link_at_the_files_own_name_and_leaves_its_target_alone(tmp_path):
    outside = _outside(tmp_path / "outside", "file")
    target = tmp_path / "results.jsonl"
    target.symlink_to(outside)
    files.write_text(target, "{}\n")
    assert outside.read_text() == NOT_THE_KITS
    assert target.read_text() == "{}\n" and not target.is_symlink()
    assert os.stat(target).st_mode & 0o777 == files.FILE_MODE


def test_a_log_opened_for_appending_replaces_a_link_planted_at_its_name(tmp_path):
    outside = _outside(tmp_path / "outside", "file")
    log = tmp_path / "stdout.log"
    log.symlink_to(outside)
    with files.open_append(log) as fh:
        fh.write(b"step 1\n")
    assert outside.read_text() == NOT_THE_KITS
    assert log.read_bytes() == b"step 1\n" and not log.is_symlink()
    with files.open_append(log) as fh:  # a log of its own is appended to, as before
        fh.write(b"step 2\n")
    assert log.read_bytes() == b"step 1\nstep 2\n"


def test_a_collect_after_a_killed_one_removes_its_staging_and_copies_no_event_through_a_link(
    session, tmp_path
):
    outside = tmp_path / "outside"
    _outside(outside, "keep")
    events = session / "runs" / CELLS[0] / "tensorboard" / "throughput"
    events.mkdir(parents=True)
    (events / "events.out.tfevents.1.host").write_bytes(b"x")
    # Where a collect of this pid once staged the copy, and where it put the old one aside.
    for name in (f".tensorboard.new{os.getpid()}", f".tensorboard.old{os.getpid()}"):
        (session / name).symlink_to(outside, target_is_directory=True)
    result_tasks.collect(Context(), "s", results=str(session.parent))
    assert sorted(p.name for p in outside.iterdir()) == ["keep"]
    copied = session / "tensorboard" / CELLS[0] / "throughput" / "events.out.tfevents.1.host"
    assert copied.read_bytes() == b"x" and not (session / "tensorboard").is_symlink()
    assert [p.name for p in session.glob(".tensorboard*")] == []


def test_a_trainer_writes_its_run_files_through_no_link_planted_in_its_run_directory(tmp_path, monkeypatch):
    from reprokit_trainers.common.measure.meter import ThroughputMeter
    from reprokit_trainers.common.record.rundir import RunDir

    monkeypatch.setenv("REPROKIT_WATCH_LOAD", "0")
    outside, run_dir = tmp_path / "outside", tmp_path / "run"
    run_dir.mkdir()
    names = ("summary.json", "sysinfo.json", "throughput.csv", "mlperf.log")
    _plant_temporaries(run_dir, names[:2], outside)
    for name in names[2:]:
        (run_dir / name).symlink_to(_outside(outside, name))
    (run_dir / "tensorboard").symlink_to(outside, target_is_directory=True)
    meter = ThroughputMeter(warmup_steps=1, total_steps=2)
    record = RunDir(run_dir)
    record.write_sysinfo()
    for _ in range(2):
        meter.step_end(4, boundary=True)
        record.log_step(meter)
    record.write_summary(meter)
    assert sorted(p.name for p in outside.iterdir()) == sorted(
        ["tmp-summary.json", "tmp-sysinfo.json", "throughput.csv", "mlperf.log"]
    )
    assert _untouched(outside) == []
    for name in names:
        assert (run_dir / name).is_file() and not (run_dir / name).is_symlink(), name
    assert (run_dir / "tensorboard").is_dir() and not (run_dir / "tensorboard").is_symlink()
    assert (run_dir / "throughput.csv").read_text().startswith("step,")


def test_a_resumed_cell_whose_run_directory_links_out_reruns_in_its_own_and_clears_nothing_outside(
    tmp_path, monkeypatch
):
    from reprokit.plan.request import Request
    from reprokit.run import session, supervise
    from reprokit.run.placement import plan
    from tests.fakes import FAKES, fake_recipe

    monkeypatch.setenv("REPROKIT_TRAINERS_PATH", str(FAKES.parent))
    recipe = fake_recipe(tmp_path / "r.yaml", [{"name": n, "args": {"fake_rate": 5}} for n in "ab"])
    the_plan = plan(Request(recipes=[str(recipe)], accelerator="cpu", scale="smoke", runtime="local"))
    session_dir = session.new_dir(str(tmp_path / "results"))
    # An unfinished run directory left as a link to another folder, and a link inside another.
    outside = tmp_path / "outside"
    _outside(outside, "keep")
    (outside / "folder").mkdir()
    _outside(outside / "folder", "keep")
    runs = session_dir / sessions.RUNS
    runs.mkdir()
    (runs / "fake--a").symlink_to(outside, target_is_directory=True)
    (runs / "fake--b").mkdir()
    (runs / "fake--b" / "tensorboard").symlink_to(outside / "folder", target_is_directory=True)
    outcomes = supervise.run_cells(the_plan, session_dir, resume=True, report_line=lambda cell, outcome: None)
    assert [o["status"] for o in outcomes] == ["ok", "ok"]
    assert sorted(str(p.relative_to(outside)) for p in outside.rglob("*")) == [
        "folder",
        "folder/keep",
        "keep",
    ]
    assert _untouched(outside) == []
    for cell in ("fake--a", "fake--b"):
        assert not (runs / cell).is_symlink() and (runs / cell / "summary.json").is_file(), cell


def test_a_resumed_session_whose_runs_folder_is_a_link_is_refused_before_any_cell_runs(tmp_path, monkeypatch):
    from reprokit.contract.errors import ReprokitError
    from reprokit.plan.request import Request
    from reprokit.run import session, supervise
    from reprokit.run.placement import plan
    from tests.fakes import FAKES, fake_recipe

    monkeypatch.setenv("REPROKIT_TRAINERS_PATH", str(FAKES.parent))
    recipe = fake_recipe(tmp_path / "r.yaml", [{"name": "a", "args": {"fake_rate": 5}}])
    the_plan = plan(Request(recipes=[str(recipe)], accelerator="cpu", scale="smoke", runtime="local"))
    session_dir = session.new_dir(str(tmp_path / "results"))
    outside = tmp_path / "outside"
    outside.mkdir()
    (session_dir / sessions.RUNS).symlink_to(outside, target_is_directory=True)
    with pytest.raises(ReprokitError, match=r"runs is a link to .*outside: a session's runs are written"):
        supervise.run_cells(the_plan, session_dir, resume=True, report_line=lambda cell, outcome: None)
    assert list(outside.iterdir()) == []  # before: the cell ran there, outside the results folder


def test_the_machine_lock_is_never_taken_through_a_link_planted_at_its_name(tmp_path, monkeypatch):
    from reprokit.run import machinelock

    outside = _outside(tmp_path / "outside", "file")
    monkeypatch.setenv("REPROKIT_LOCK_DIR", str(tmp_path / "locks"))
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / machinelock.NAME).symlink_to(outside)
    with machinelock.held(tmp_path / "session", say=print):
        pass
    assert outside.read_text() == NOT_THE_KITS
    assert not (tmp_path / "locks" / machinelock.NAME).is_symlink()


def test_a_bare_node_runs_archive_and_rows_go_to_its_out_folder_through_no_planted_link(tmp_path):
    from reprokit.barenode import archive

    outside, out = tmp_path / "outside", tmp_path / "out"
    out.mkdir()
    session_dir = write_session(tmp_path / "scratch" / "results" / "s", "2025-01-01T10:00:00+00:00")
    _plant_temporaries(out, ("node-a.tar.gz",), outside)
    (out / "node-a.tar.gz").symlink_to(_outside(outside, "archive"))
    archive.pack(out / "node-a.tar.gz", {"session": session_dir})
    assert _untouched(outside) == []
    assert (out / "node-a.tar.gz").is_file() and not (out / "node-a.tar.gz").is_symlink()


def test_the_synthetic_image_pool_is_written_in_a_folder_of_its_own_never_through_a_planted_link(tmp_path):
    from reprokit_trainers.common.data import imagenet

    outside = tmp_path / "outside"
    _outside(outside, "keep")
    pool = tmp_path / "jpegs" / "imagenet-pool"
    pool.parent.mkdir()
    # Where the pool was once staged (the writer's pid: known to anyone on the machine).
    (pool.parent / f".{pool.name}.{os.getpid()}").symlink_to(outside, target_is_directory=True)
    written = imagenet._written(pool, lambda: [b"jpeg 0", b"jpeg 1"])
    assert sorted(p.name for p in outside.iterdir()) == ["keep"]
    assert pool.is_dir() and not pool.is_symlink()
    assert [p.read_bytes() for p in written] == [b"jpeg 0", b"jpeg 1"]
