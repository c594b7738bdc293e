"""Writers of a session take turns: two reports, or a collect beside a report, or two MLflow exports to
one store, started together all finish and leave whole files; and a report killed at any moment
leaves the report in place with every image it shows."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

from reprokit.collect import collect
from reprokit.report import report
from tests.conftest import ROOT
from tests.fakes.sessions import CELLS, write_session


def _together(*calls) -> list[BaseException]:
    """Run each call in a thread of its own, all at once; the exceptions they raised."""
    failed: list[BaseException] = []

    def run(call):
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - the test reports whatever a writer raised
            failed.append(exc)

    threads = [threading.Thread(target=run, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
        time.sleep(0.05)
    for thread in threads:
        thread.join(timeout=120)
    return failed


@pytest.fixture
def session(tmp_path, monkeypatch):
    """A session whose cells have TensorBoard event files, copied slowly (a busy disk): the moment two
    writers copying them at once get in each other's way lasts."""
    folder = write_session(tmp_path / "results" / "s", "2025-01-01T10:00:00+00:00")
    for cell in CELLS:
        events = folder / "runs" / cell / "tensorboard" / "throughput"
        events.mkdir(parents=True)
        for n in range(3):
            (events / f"events.out.tfevents.{n}.host").write_bytes(b"\0" * 64)
    copy = shutil.copyfile

    def slow(*args, **kwargs):
        time.sleep(0.1)
        return copy(*args, **kwargs)

    monkeypatch.setattr(shutil, "copyfile", slow)
    return folder


def test_two_reports_at_once_both_finish(session):
    assert _together(lambda: report.write(session), lambda: report.write(session)) == []
    assert sorted(p.name for p in (session / "tensorboard").iterdir()) == sorted(CELLS)
    assert all(len(list((session / "tensorboard" / c / "throughput").iterdir())) == 3 for c in CELLS)


def test_a_collect_during_a_report_waits_for_it(session, capsys):
    assert _together(lambda: report.write(session), lambda: collect.collect(session)) == []
    assert "waiting: a report (pid " in capsys.readouterr().err
    assert sorted(p.name for p in (session / "tensorboard").iterdir()) == sorted(CELLS)


def test_two_exports_at_once_take_turns_and_neither_undoes_the_other(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from reprokit.report import export_mlflow, mlflow_store

    folder = write_session(tmp_path / "results" / "s", "2025-01-01T10:00:00+00:00")
    real, first = MlflowClient.log_batch, threading.Event()

    def held_up(self, *args, **kwargs):
        # The first export to log a cell's values stops there (its run RUNNING) while the second starts.
        if not first.is_set():
            first.set()
            time.sleep(3)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", held_up)
    done: list[export_mlflow.Exported] = []
    # A fresh store: both would create its tables at once (alembic's CommandError before).
    assert (
        _together(
            lambda: done.append(export_mlflow.export(folder)),
            lambda: done.append(export_mlflow.export(folder)),
        )
        == []
    )
    assert sorted(len(d.made) for d in done) == [0, 3] and [d.rolled_back for d in done] == [0, 0]
    client = MlflowClient(tracking_uri=mlflow_store.default_uri(folder.parent)[0])
    runs = client.search_runs([client.get_experiment_by_name("reprokit").experiment_id])
    assert sorted(r.data.tags["reprokit.cell"] for r in runs) == sorted(["s", *CELLS])
    assert {r.info.status for r in runs} == {"FINISHED"}


KILLED_WHILE_DRAWING = """
import os, signal, sys
from pathlib import Path
from reprokit.report import drawing, report

def dies(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # as a scheduler's or a user's kill lands: no cleanup runs

drawing.save = dies
report.write(Path(sys.argv[1]))
"""


def test_a_report_killed_while_drawing_keeps_the_previous_report_and_all_its_images(tmp_path):
    folder = write_session(tmp_path / "results" / "s", "2025-01-01T10:00:00+00:00")
    report.write(folder)
    before = (folder / "report.md").read_text()
    shown = [line.split("](")[1][:-1] for line in before.splitlines() if line.startswith("![")]
    assert shown and all((folder / name).is_file() for name in shown)
    killed = subprocess.run([sys.executable, "-c", KILLED_WHILE_DRAWING, str(folder)], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert killed.returncode == -15, killed.stderr
    assert (folder / "report.md").read_text() == before
    assert [name for name in shown if not (folder / name).is_file()] == []
    # The next report finishes what the killed one began, and leaves no file of its own behind.
    report.write(folder)
    assert (
        sorted(
            p.name for p in folder.iterdir() if p.name.startswith(".") and p.name != ".reprokit-writing.lock"
        )
        == []
    )
    assert os.path.exists(folder / "report.html")


@pytest.mark.parametrize("through", ["a link to its folder", "a link to the file"])
def test_two_exports_into_one_store_through_two_paths_take_turns_and_log_each_cell_once(
    tmp_path, monkeypatch, through
):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from reprokit.report import export_mlflow

    folder = write_session(tmp_path / "results" / "s", "2025-01-01T10:00:00+00:00")
    store = tmp_path / "store"
    store.mkdir()
    database = store / "mlflow.db"
    if through == "a link to its folder":
        (tmp_path / "alias").symlink_to(store, target_is_directory=True)
        other = tmp_path / "alias" / "mlflow.db"
    else:
        (tmp_path / "elsewhere").mkdir()
        other = tmp_path / "elsewhere" / "mlflow.db"
        other.symlink_to(database)
    # The store made with the session's run in it, and its cells left to log (by two exports at once).
    export_mlflow.export(folder, f"sqlite:///{database}")
    client = MlflowClient(tracking_uri=f"sqlite:///{database}")
    experiment = client.get_experiment_by_name("reprokit").experiment_id
    for run in client.search_runs([experiment]):
        if run.data.tags["reprokit.cell"] != "s":
            client.delete_run(run.info.run_id)
    real, first = MlflowClient.create_run, threading.Event()

    def held_up(self, *args, **kwargs):
        # The first export to make a cell's run stops just before (it found no cell in the store) while
        # the second starts.
        if not first.is_set():
            first.set()
            time.sleep(3)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "create_run", held_up)
    done: list[export_mlflow.Exported] = []
    assert (
        _together(
            lambda: done.append(export_mlflow.export(folder, f"sqlite:///{database}")),
            lambda: done.append(export_mlflow.export(folder, f"sqlite:///{other}")),
        )
        == []
    )
    # Before, through a link to the file: two locks, and each export logged every cell under the one parent.
    runs = client.search_runs([experiment])
    assert sorted(r.data.tags["reprokit.cell"] for r in runs) == sorted(["s", *CELLS])
    assert sorted(len(d.made) for d in done) == [0, len(CELLS)]
