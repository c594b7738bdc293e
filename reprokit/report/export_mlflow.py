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
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import importlib
import json
import os
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from reprokit.collect import collect, results_folder
from reprokit.contract import bounded, installed, rundirs, sessions, writelock
from reprokit.contract.bounded import Malformed
from reprokit.contract.errors import ReprokitError
from reprokit.contract.textsafe import line
from reprokit.judge.result_row import Row
from reprokit.run import machinelock

EXPERIMENT = "reprokit"
PARAM_LIMIT = 500  # MLflow's limit on a parameter's value
KEY_LIMIT = 250  # and on a parameter's or a tag's name
TAG_LIMIT = 5000  # and on a tag's value
# The stores MLflow 3 serves, by the tracking URI's scheme (its file store, `file://` or a folder, is refused).
SCHEMES = ("sqlite", "http", "https", "databricks", "postgresql", "mysql", "mssql")
STORES = "sqlite:///path/to/mlflow.db, or an MLflow server (http://host:5000)"
# Who runs an export: a RUNNING run of a live exporter is its run, not an interrupted one.
OWNER_TAG = "reprokit.export.owner"
# What the `mlflow` extra installs that an export imports: MLflow's client, and for a SQLite or SQL
# store its database layer (a server needs only the client).
CLIENT_MODULES = ("mlflow.tracking",)
DATABASE_MODULES = ("sqlalchemy", "alembic")
SERVERS = ("http", "https", "databricks")
# How long a store's server has to answer before the export starts, in seconds: one that answers takes
# milliseconds; one that never does held an export 253 s in MLflow's own retries, then five tracebacks.
REACH_TIMEOUT_S = 5.0
# The SQL stores' default ports (a URI that names no port).
SQL_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}


def default_uri(results: Path) -> tuple[str, str]:
    """(tracking URI, artifact location) of the local store of a results folder."""
    results = results.resolve()
    return f"sqlite:///{results / 'mlflow.db'}", (results / "mlartifacts").as_uri()


def artifact_location(tracking_uri: str) -> str | None:
    """Where a new experiment keeps its artifacts: beside a SQLite store's file; a server or a file
    store decides for itself (None)."""
    prefix = "sqlite:///"
    if not tracking_uri.startswith(prefix):
        return None
    database = Path(tracking_uri[len(prefix) :])
    return (database.resolve().parent / "mlartifacts").as_uri()


def check_uri(tracking_uri: str) -> str:
    """A tracking URI the export can use, or one line naming the stores that work."""
    scheme = _scheme(tracking_uri)
    # MLflow's own opt-in to its file store, which the user may have set.
    opted_in = os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() == "true" and scheme in ("", "file")
    if scheme not in SCHEMES and not opted_in:
        why = (
            "MLflow 3 refuses its file store"
            if scheme in ("", "file")
            else f"no MLflow store speaks {scheme!r}"
        )
        raise ReprokitError(f"--tracking-uri {line(tracking_uri)}: {why}; give {STORES}")
    if scheme == "sqlite" and not tracking_uri.startswith("sqlite:///"):
        raise ReprokitError(
            f"--tracking-uri {line(tracking_uri)}: a SQLite store is sqlite:///path/to/mlflow.db"
        )
    return tracking_uri


def _scheme(tracking_uri: str) -> str:
    return urlsplit(tracking_uri).scheme.split("+")[0].lower()


def check_extra(tracking_uri: str | None) -> None:
    """The modules an export to this store (None: the results folder's SQLite file) imports, there: else
    one line saying how to install them (`make reproduce` installs the kit without its `mlflow` extra)."""
    server = tracking_uri is not None and _scheme(tracking_uri) in SERVERS
    wanted = CLIENT_MODULES + (() if server else DATABASE_MODULES)
    missing = []
    for module in wanted:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module.split(".")[0])
    if missing:
        raise ReprokitError(
            f"exporting to MLflow needs the kit's mlflow extra ({', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not installed here): "
            f"{installed.pip_install('mlflow')}"
        )


def check_server(tracking_uri: str) -> None:
    """A store behind a server answers within REACH_TIMEOUT_S seconds, else one line naming the URI and
    what went wrong: an MLflow server is asked for its /health (any HTTP answer will do: a 401 is a server
    there), a SQL store's host is connected to. A SQLite file has no server; Databricks' host is in
    its profile."""
    scheme, parts, timeout_s = _scheme(tracking_uri), urlsplit(tracking_uri), REACH_TIMEOUT_S
    try:
        if scheme in ("http", "https"):
            health = f"{tracking_uri.rstrip('/')}/health"
            try:
                with urllib.request.urlopen(health, timeout=timeout_s):  # noqa: S310 -- the user's own server
                    pass
            except urllib.error.HTTPError:
                pass  # it answered
        elif scheme in SQL_PORTS and parts.hostname:
            socket.create_connection(
                (parts.hostname, parts.port or SQL_PORTS[scheme]), timeout=timeout_s
            ).close()
    except (OSError, http.client.HTTPException, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        if isinstance(reason, TimeoutError | socket.timeout):
            why = f"no answer within {timeout_s:g} s"
        else:
            why = str(getattr(reason, "strerror", None) or reason) or type(reason).__name__
        raise ReprokitError(
            f"--tracking-uri {line(tracking_uri)}: the MLflow store cannot be reached ({line(why)}); "
            "start it, or give another store"
        ) from None


def _lock_file(tracking_uri: str) -> Path:
    """Where exports to this store take turns: beside a SQLite file (every machine that writes it sees the
    lock), else in this machine's lock folder, by the URI. Keyed by the store, not by how it was named:
    beside the SQLite file itself (its real path: through a link to it or to its folder, the same lock),
    a server by its URI with the case and trailing slash that do not change it left out."""
    if tracking_uri.startswith("sqlite:///"):
        given = Path(tracking_uri[len("sqlite:///") :])
        database = Path(os.path.realpath(given))
        if not database.parent.is_dir():
            raise ReprokitError(f"--tracking-uri {line(tracking_uri)}: no folder {line(given.parent)}")
        return database.parent / f".{database.name}.lock"
    parts = urlsplit(tracking_uri)
    server = f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path.rstrip('/')}"
    folder = machinelock.lock_dir()
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"reprokit-mlflow-{hashlib.sha256(server.encode()).hexdigest()[:16]}.lock"


def _key(name: str) -> str:
    """A parameter's name as MLflow takes one (letters, digits, _ - . / and spaces; 250 at most)."""
    return re.sub(r"[^\w\-. /]", "_", name, flags=re.ASCII)[:KEY_LIMIT]


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


def _params(row: Row, cell: dict[str, Any]) -> dict[str, str]:
    args = cell.get("args") if isinstance(cell.get("args"), dict) else {}
    flat = {_key(f"arg.{k}"): v for k, v in args.items()}
    flat.update(
        {
            k: getattr(row, k)
            for k in ("recipe", "variant", "scale", "accelerator", "devices", "nodes", "definition")
        }
    )
    return {
        k: (json.dumps(v) if isinstance(v, dict | list) else str(v))[:PARAM_LIMIT]
        for k, v in flat.items()
        if v is not None
    }


def _tags(row: Row, session: str) -> dict[str, str]:
    tags = {
        "reprokit.run.session": session,
        "reprokit.cell": str(row.cell_id),
        "reprokit.verdict": str(row.verdict),
    }
    if len(row.repetitions) > 1:  # a series: its numbers are the median of these runs
        tags["reprokit.repeats"] = str(row.repeats)
        tags["reprokit.runs"] = ",".join(str(r.get("cell_id")) for r in row.repetitions)
    if row.kept is not None:  # not read again from its run directory: why
        tags["reprokit.kept"] = row.kept
    tags.update({_key(f"provenance.{k}"): str(v) for k, v in row.provenance.items() if v is not None})
    return {k: v[:TAG_LIMIT] for k, v in tags.items()}


# The summary's numbers logged once per run (Row's fields), beside the per-step curves.
RESULT_METRICS = (
    "measured", "measured_per_device", "ratio_per_device", "measured_after_warmup", "measured_whole_run",
    "measured_gaudi_trainer", "mfu", "peak_memory_bytes", "step_time_p50_s", "step_time_p90_s",
    "step_time_p99_s", "samples_per_joule", "energy_joules", "power_mean_w", "power_peak_w",
    "utilization_mean", "data_wait_share", "compute_share", "communication_share", "other_share",
)  # fmt: skip
# What throughput.csv holds per logging step and MLflow draws as curves.
STEP_METRICS = ("samples_per_second", "loss", "data_wait", "compute", "communication", "other")
BATCH = {"metrics": 1000, "params": 100, "tags": 100}  # MLflow's limits per log_batch call
GIT_COMMIT = "mlflow.source.git.commit"


def _metrics(row: Row, curves: dict[str, list[tuple[int, float]]], now_ms: int) -> list[Any]:
    """The per-step curves (rundirs.curves: finite numbers, bounded) and the row's numbers."""
    from mlflow.entities import Metric

    found = [
        Metric(name, value, now_ms, step) for name in STEP_METRICS for step, value in curves.get(name, [])
    ]
    for name in RESULT_METRICS:
        value = getattr(row, name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            found.append(Metric(f"result.{name}", float(value), now_ms, 0))
    return found


def _log_batches(client, run_id: str, metrics: list[Any], params: list[Any], tags: list[Any]) -> None:
    """Everything of one run in as few log_batch calls as MLflow's limits allow."""
    while metrics or params or tags:
        client.log_batch(
            run_id,
            metrics=metrics[: BATCH["metrics"]],
            params=params[: BATCH["params"]],
            tags=tags[: BATCH["tags"]],
        )
        metrics, params = metrics[BATCH["metrics"] :], params[BATCH["params"] :]
        tags = tags[BATCH["tags"] :]


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


def _store(session_dir: Path, tracking_uri: str | None) -> tuple[str, str | None]:
    if tracking_uri:
        return check_uri(tracking_uri), artifact_location(tracking_uri)
    # The results folder the session was found in (the session is inside it: session.find), never the
    # folder a link would lead to.
    results = session_dir.parent.resolve()
    if not os.access(results, os.W_OK):
        raise ReprokitError(
            f"the results folder {results} cannot be written, and the default MLflow store lives there "
            "(mlflow.db): give --tracking-uri (sqlite:///elsewhere/mlflow.db, or a server)"
        )
    return default_uri(results)


def export(session_dir: Path, tracking_uri: str | None = None) -> Exported:
    """Log the session; the runs made (none for cells already there), those rolled back, and what was
    left out. The extra and the store's server are checked first; exports to one store take turns; the
    store's refusal midway is one line naming it."""
    uri, artifacts = _store(session_dir, tracking_uri)
    check_extra(uri)
    check_server(uri)
    read = collect.read(session_dir)  # read, not written: the folder may be read-only
    found = Exported(uri, skipped=read.skipped, table=read.rows)
    from mlflow.exceptions import MlflowException

    with writelock.held(_lock_file(uri), "an MLflow export"):
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
            parent_tags[GIT_COMMIT] = revisions[0]
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
        tags = {**_tags(row, session), "mlflow.parentRunId": parent.info.run_id, **owner}
        if row.kit_revision:
            tags[GIT_COMMIT] = row.kit_revision
        run = client.create_run(experiment, run_name=row.cell_id, tags=tags)
        run_id = run.info.run_id
        with _released_if_stopped(client, run_id):
            params = [Param(key, value) for key, value in _params(row, cell).items()]
            metrics = _metrics(row, curves, int(time.time() * 1000))
            _log_batches(client, run_id, metrics, params, [])
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
            rundirs.curves(run_dir, STEP_METRICS, root),
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
