"""A session's results into MLflow: one parent run for the session (its report as artifacts) and one
child run per cell with its parameters (the trainer's arguments, scale, accelerator, devices),
per-step metrics (samples/s, loss and the breakdown's shares from throughput.csv), its summary numbers
(the figures, step-time percentiles, energy, the breakdown) and provenance tags, the kit's git commit
as MLflow's own `mlflow.source.git.commit`. Each run's values go in `log_batch` calls (MLflow's
limits per call: 1,000 metrics, 100 parameters, 100 tags), not one call per value: a 1,000-step run
takes about a second on SQLite instead of a minute (benchmarks/README.md).

The default store is a local SQLite database beside the results (results/mlflow.db, artifacts in
results/mlartifacts); `--tracking-uri` names another (a team's MLflow server; a SQLite file keeps its
artifacts beside it, never in the folder the command ran from). Exporting a session again leaves the
runs already there as they are, and finishes what an interrupted export began: a run is complete once
it is terminated (it is terminated last), and a run left RUNNING by an export that is gone (its process
on this host ended, or it was stopped) is deleted and made again. Exports to one store take turns (a
lock beside a SQLite store, else in this machine's lock folder): a second export waits for the first,
and never takes its unfinished runs for an interrupted export's. The session's folder is only read (a
read-only results folder exports to a store elsewhere), through the bounded reader: a file that leaves
the results folder through a link is not read nor logged. A session of any name (quotes, a newline)
is found again: MLflow's filters have no escape, so a name no quote can hold is matched by reading.

The store (which, its extra, its server, its lock): mlflow_store.py; what a cell's run holds: mlflow_run.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprokit.collect import collect, results_folder
from reprokit.contract import bounded, rundirs, sessions, writelock
from reprokit.contract.bounded import Malformed
from reprokit.contract.errors import ReprokitError
from reprokit.contract.textsafe import line
from reprokit.judge.result_row import Row
from reprokit.report import mlflow_run, mlflow_store

EXPERIMENT = "reprokit"
# Who runs an export: a RUNNING run of a live exporter is its run, not an interrupted one.
OWNER_TAG = "reprokit.export.owner"


def _quoted(value: str) -> str | None:
    """`value` as a string in an MLflow filter; None where no quote can hold it (MLflow's filters
    have no escape: a name with both quote characters is matched by reading the runs instead)."""
    for quote in ("'", '"'):
        if quote not in value and not re.search(r"[\x00-\x1f]", value):
            return f"{quote}{value}{quote}"
    return None


def _session_runs(client, experiment: str, session: str) -> list[Any]:
    """The runs already logged for a session (any name it can have: an apostrophe, a newline)."""
    quoted = _quoted(session)
    if quoted is not None:
        return list(client.search_runs([experiment], filter_string=f"tags.`reprokit.run.session` = {quoted}"))
    found, token = [], None
    while True:
        page = client.search_runs([experiment], max_results=1000, page_token=token)
        found += [r for r in page if r.data.tags.get("reprokit.run.session") == session]
        token = page.token
        if not token:
            return found


def _alive_here(owner: str | None) -> bool:
    """Whether the export that owns a RUNNING run still runs: on this host, its process is there; an
    owner on another host is taken as alive (nothing here can tell)."""
    if not owner:
        return False  # an export stopped (or of a kit before owners): left RUNNING, so interrupted
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname():
        return True
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        pass
    return True


def _client(tracking_uri: str):
    from mlflow.tracking import MlflowClient  # there: check_extra

    return MlflowClient(tracking_uri=tracking_uri)


def _experiment(client, artifact_location: str | None) -> str:
    found = client.get_experiment_by_name(EXPERIMENT)
    if found is not None:
        return found.experiment_id
    return client.create_experiment(EXPERIMENT, artifact_location=artifact_location)


@dataclass
class Exported:
    uri: str
    made: list[str] = field(default_factory=list)
    # Runs an interrupted export had left unfinished, deleted before being made again.
    rolled_back: int = 0
    # What was not read nor logged (a file the kit will not read, a link out of the results folder).
    skipped: list[Malformed] = field(default_factory=list)
    # The session's rows as collect read them (those kept from the last collect say why: Row.kept).
    table: list[Row] = field(default_factory=list)


def export(session_dir: Path, tracking_uri: str | None = None) -> Exported:
    """Log the session; the runs made (none for cells already there), those rolled back, and what was
    left out. The extra and the store's server are checked first; exports to one store take turns; the
    store's refusal midway is one line naming it."""
    uri, artifacts = mlflow_store.store_of(session_dir, tracking_uri)
    mlflow_store.check_extra(uri)
    mlflow_store.check_server(uri)
    read = collect.read(session_dir)  # read, not written: the folder may be read-only
    found = Exported(uri, skipped=read.skipped, table=read.rows)
    from mlflow.exceptions import MlflowException

    with writelock.held(mlflow_store.lock_file(uri), "an MLflow export"):
        try:
            _export(session_dir, read.rows, uri, artifacts, found)
        except MlflowException as exc:
            # A server that went away or refused midway (MLflow has retried): what was made stays, and
            # the next export finishes the rest.
            said = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ReprokitError(f"the MLflow store {line(uri)} refused the export: {line(said)}") from None
    return found


def _export(session_dir: Path, table: list[Row], uri: str, artifacts: str | None, found: Exported) -> None:
    from mlflow.entities import Param

    client = _client(uri)
    experiment = _experiment(client, artifacts)
    # A name that is not UTF-8 is logged as its bytes escaped (MLflow holds text).
    session = results_folder.printable(session_dir.name)
    root = session_dir.parent
    owner = {OWNER_TAG: f"{socket.gethostname()}:{os.getpid()}"}
    existing: dict[str, Any] = {}
    for run in _session_runs(client, experiment, session):
        if run.info.status != "RUNNING":
            existing[run.data.tags.get("reprokit.cell")] = run
        elif _alive_here(run.data.tags.get(OWNER_TAG)):
            raise ReprokitError(
                f"session {line(session)} is being exported to {uri} by {run.data.tags[OWNER_TAG]} "
                f"(run {run.info.run_id} is RUNNING); export it again once that export ends (if it is gone, "
                f"delete that run: mlflow runs delete --run-id {run.info.run_id})"
            )
        else:  # an export stopped before it terminated the run
            client.delete_run(run.info.run_id)
            found.rolled_back += 1
    parent = existing.get(session)
    if parent is None:
        revisions = sorted({r.kit_revision for r in table if r.kit_revision})
        parent_tags = {"reprokit.run.session": session, "reprokit.cell": session, **owner}
        if len(revisions) == 1:  # the session's kit commit; a session resumed by another kit has none
            parent_tags[mlflow_run.GIT_COMMIT] = revisions[0]
        parent = client.create_run(experiment, run_name=session, tags=parent_tags)
        with _released_if_stopped(client, parent.info.run_id):
            for name in (
                sessions.REPORT_HTML,
                sessions.REPORT_MD,
                sessions.RESULTS_CSV,
                sessions.SESSION_FILE,
            ):
                path = session_dir / name
                if not path.is_file():
                    continue
                try:
                    bounded.check_inside(path, root)
                except Malformed as exc:
                    found.skipped.append(exc)
                    continue
                client.log_artifact(parent.info.run_id, str(path))
            client.set_terminated(parent.info.run_id)
        found.made.append(parent.info.run_id)
    for row in table:
        if row.cell_id in existing:
            continue
        cell, curves = _run_files(session_dir, row, found)
        tags = {**mlflow_run.tags(row, session), "mlflow.parentRunId": parent.info.run_id, **owner}
        if row.kit_revision:
            tags[mlflow_run.GIT_COMMIT] = row.kit_revision
        run = client.create_run(experiment, run_name=row.cell_id, tags=tags)
        run_id = run.info.run_id
        with _released_if_stopped(client, run_id):
            params = [Param(key, value) for key, value in mlflow_run.params(row, cell).items()]
            metrics = mlflow_run.metrics(row, curves, int(time.time() * 1000))
            mlflow_run.log_batches(client, run_id, metrics, params, [])
            # Last: a terminated run is a complete one (an interrupted export leaves it RUNNING).
            client.set_terminated(run_id, status="FINISHED" if row.status == "ok" else "FAILED")
        found.made.append(run_id)


def _source(row: Row) -> str | None:
    """The run directory whose cell.json and throughput.csv a row's MLflow run takes: its own, or for a
    series of repeated runs (a row of no run directory) the run its row keeps (repeats.kept: the first
    that measured, else the first); none for a row kept from the last collect (its runs are gone or
    unreadable: its numbers are the stored row's)."""
    if row.kept is not None:
        return None
    if row.run_dir:
        return row.run_dir
    ran = [r for r in row.repetitions if r.get("cell_id")]
    done = [r for r in ran if r.get("status") == "ok" and r.get("measured") is not None]
    return str((done or ran)[0]["cell_id"]) if ran else None


def _run_files(session_dir: Path, row: Row, found: Exported) -> tuple[dict[str, Any], dict[str, Any]]:
    """A row's cell.json and per-step curves from its source run directory; none for a row that has
    none (a kept row: its stored numbers are logged, without curves), and what could not be read is
    added to `found.skipped`."""
    source = _source(row)
    if source is None:
        return {}, {}
    run_dir = session_dir / sessions.RUNS / source
    root = session_dir.parent
    try:
        return (
            bounded.json_object(run_dir / rundirs.FILES["cell"], root) or {},
            rundirs.curves(run_dir, mlflow_run.STEP_METRICS, root),
        )
    except Malformed as exc:
        found.skipped.append(exc)
        return {}, {}


@contextlib.contextmanager
def _released_if_stopped(client, run_id: str) -> Iterator[None]:
    """An export stopped while a run is unfinished (Ctrl-C, an error) leaves it for the next export to
    redo, and no longer holds it (the process may live on: a notebook, a test)."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            client.delete_tag(run_id, OWNER_TAG)
        raise
