"""A session's results into MLflow: one parent run for the session (its report as artifacts) and one
child run per cell with its parameters (the trainer's arguments, scale, accelerator, devices),
per-step metrics (samples/s and loss from throughput.csv), its summary numbers and provenance tags.

The default store is a local SQLite database beside the results (results/mlflow.db, artifacts in
results/mlartifacts); `--tracking-uri` names another (a team's MLflow server; a SQLite file keeps its
artifacts beside it, never in the folder the command ran from). Exporting a session again leaves the
runs already there as they are, and finishes what an interrupted export began: a run is complete once
it is terminated (it is terminated last), and a run left RUNNING is deleted and made again. The
session's folder is only read (a read-only results folder exports to a store elsewhere).
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprokit.errors import ReprokitError
from reprokit.results import collect
from reprokit.results.row import Row
from reprokit.run import rundirs
from reprokit.run import session as sessions

EXPERIMENT = "reprokit"
PARAM_LIMIT = 500  # MLflow's limit on a parameter's value


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


def _client(tracking_uri: str):
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise ReprokitError(
            'exporting to MLflow needs mlflow: pip install "reprokit-bench[mlflow]"'
        ) from None
    return MlflowClient(tracking_uri=tracking_uri)


def _experiment(client, artifact_location: str | None) -> str:
    found = client.get_experiment_by_name(EXPERIMENT)
    if found is not None:
        return found.experiment_id
    return client.create_experiment(EXPERIMENT, artifact_location=artifact_location)


def _params(row: Row, cell: dict[str, Any]) -> dict[str, str]:
    flat = {f"arg.{k}": v for k, v in (cell.get("args") or {}).items()}
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
    tags.update({f"provenance.{k}": str(v) for k, v in row.provenance.items() if v is not None})
    return tags


def _steps(run_dir: Path) -> list[dict[str, str]]:
    path = run_dir / rundirs.FILES["throughput"]
    if not path.exists():
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@dataclass
class Exported:
    uri: str
    made: list[str] = field(default_factory=list)
    # Runs an interrupted export had left unfinished, deleted before being made again.
    rolled_back: int = 0


def _store(session_dir: Path, tracking_uri: str | None) -> tuple[str, str | None]:
    if tracking_uri:
        return tracking_uri, artifact_location(tracking_uri)
    results = session_dir.resolve().parent
    if not os.access(results, os.W_OK):
        raise ReprokitError(
            f"the results folder {results} cannot be written, and the default MLflow store lives there "
            "(mlflow.db): give --tracking-uri (sqlite:///elsewhere/mlflow.db, or a server)"
        )
    return default_uri(results)


def export(session_dir: Path, tracking_uri: str | None = None) -> Exported:
    """Log the session; the runs made (none for cells already there) and those rolled back."""
    table = collect.rows(session_dir)  # read, not written: the folder may be read-only
    uri, artifacts = _store(session_dir, tracking_uri)
    client = _client(uri)
    experiment = _experiment(client, artifacts)
    session = session_dir.name
    found = Exported(uri)
    existing: dict[str, Any] = {}
    for run in client.search_runs([experiment], filter_string=f"tags.`reprokit.run.session` = '{session}'"):
        if run.info.status == "RUNNING":  # an export stopped before it terminated the run
            client.delete_run(run.info.run_id)
            found.rolled_back += 1
        else:
            existing[run.data.tags.get("reprokit.cell")] = run
    parent = existing.get(session)
    if parent is None:
        parent = client.create_run(
            experiment, run_name=session, tags={"reprokit.run.session": session, "reprokit.cell": session}
        )
        for name in (sessions.REPORT_HTML, sessions.REPORT_MD, sessions.RESULTS_CSV, sessions.SESSION_FILE):
            if (session_dir / name).exists():
                client.log_artifact(parent.info.run_id, str(session_dir / name))
        client.set_terminated(parent.info.run_id)
        found.made.append(parent.info.run_id)
    for row in table:
        if row.cell_id in existing or not row.run_dir:
            continue
        run_dir = session_dir / sessions.RUNS / row.run_dir
        cell = rundirs.read_json(run_dir / rundirs.FILES["cell"]) or {}
        tags = {**_tags(row, session), "mlflow.parentRunId": parent.info.run_id}
        run = client.create_run(experiment, run_name=row.cell_id, tags=tags)
        run_id = run.info.run_id
        for key, value in _params(row, cell).items():
            client.log_param(run_id, key, value)
        for step in _steps(run_dir):
            for metric in ("samples_per_second", "loss"):
                if step.get(metric) not in (None, ""):
                    client.log_metric(run_id, metric, float(step[metric]), step=int(step["step"]))
        for metric in ("measured", "measured_per_device", "ratio_per_device", "measured_after_warmup",
                       "measured_whole_run", "measured_gaudi_trainer", "mfu", "peak_memory_bytes"):  # fmt: skip
            value = getattr(row, metric)
            if isinstance(value, int | float):
                client.log_metric(run_id, f"result.{metric}", float(value))
        # Last: a terminated run is a complete one (an interrupted export leaves it RUNNING).
        client.set_terminated(run_id, status="FINISHED" if row.status == "ok" else "FAILED")
        found.made.append(run_id)
    return found
