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
it is terminated (it is terminated last), and a run left RUNNING is deleted and made again. The
session's folder is only read (a read-only results folder exports to a store elsewhere).
"""

from __future__ import annotations

import csv
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprokit import DISTRIBUTION
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
            f'exporting to MLflow needs mlflow: pip install "{DISTRIBUTION}[mlflow]"'
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


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def _metrics(row: Row, steps: list[dict[str, str]], now_ms: int) -> list[Any]:
    from mlflow.entities import Metric

    found = []
    for step in steps:
        number = _number(step.get("step"))
        if number is None:
            continue
        for name in STEP_METRICS:
            value = _number(step.get(name))
            if value is not None:
                found.append(Metric(name, value, now_ms, int(number)))
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
        revisions = sorted({r.kit_revision for r in table if r.kit_revision})
        parent_tags = {"reprokit.run.session": session, "reprokit.cell": session}
        if len(revisions) == 1:  # the session's kit commit; a session resumed by another kit has none
            parent_tags[GIT_COMMIT] = revisions[0]
        parent = client.create_run(experiment, run_name=session, tags=parent_tags)
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
        from mlflow.entities import Param

        tags = {**_tags(row, session), "mlflow.parentRunId": parent.info.run_id}
        if row.kit_revision:
            tags[GIT_COMMIT] = row.kit_revision
        run = client.create_run(experiment, run_name=row.cell_id, tags=tags)
        run_id = run.info.run_id
        params = [Param(key, value) for key, value in _params(row, cell).items()]
        metrics = _metrics(row, _steps(run_dir), int(time.time() * 1000))
        _log_batches(client, run_id, metrics, params, [])
        # Last: a terminated run is a complete one (an interrupted export leaves it RUNNING).
        client.set_terminated(run_id, status="FINISHED" if row.status == "ok" else "FAILED")
        found.made.append(run_id)
    return found
