"""A session's results into MLflow: one parent run for the session (its report as artifacts) and one
child run per cell with its parameters (the trainer's arguments, scale, accelerator, devices),
per-step metrics (samples/s and loss from throughput.csv), its summary numbers and provenance tags.

The default store is a local SQLite database beside the results (results/mlflow.db, artifacts in
results/mlartifacts); `--tracking-uri` names another (a team's MLflow server). Exporting a session
again leaves the runs already there as they are.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from reprokit.errors import ReprokitError
from reprokit.results import collect

EXPERIMENT = "reprokit"
PARAM_LIMIT = 500  # MLflow's limit on a parameter's value


def default_uri(results: Path) -> tuple[str, str]:
    """(tracking URI, artifact location) of the local store of a results folder."""
    results = results.resolve()
    return f"sqlite:///{results / 'mlflow.db'}", (results / "mlartifacts").as_uri()


def _client(tracking_uri: str):
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise ReprokitError('exporting to MLflow needs mlflow: pip install "reprokit[mlflow]"') from None
    return MlflowClient(tracking_uri=tracking_uri)


def _experiment(client, artifact_location: str | None) -> str:
    found = client.get_experiment_by_name(EXPERIMENT)
    if found is not None:
        return found.experiment_id
    return client.create_experiment(EXPERIMENT, artifact_location=artifact_location)


def _params(row: dict[str, Any], cell: dict[str, Any]) -> dict[str, str]:
    flat = {f"arg.{k}": v for k, v in (cell.get("args") or {}).items()}
    flat.update(
        {
            k: row.get(k)
            for k in ("recipe", "variant", "scale", "accelerator", "devices", "nodes", "definition")
        }
    )
    return {
        k: (json.dumps(v) if isinstance(v, dict | list) else str(v))[:PARAM_LIMIT]
        for k, v in flat.items()
        if v is not None
    }


def _tags(row: dict[str, Any], session: str) -> dict[str, str]:
    tags = {
        "reprokit.run.session": session,
        "reprokit.cell": row["cell_id"],
        "reprokit.verdict": str(row.get("verdict")),
    }
    tags.update(
        {f"provenance.{k}": str(v) for k, v in (row.get("provenance") or {}).items() if v is not None}
    )
    return tags


def _steps(run_dir: Path) -> list[dict[str, str]]:
    path = run_dir / "throughput.csv"
    if not path.exists():
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def export(session_dir: Path, tracking_uri: str | None = None) -> tuple[str, list[str]]:
    """Log the session; returns the tracking URI and the ids of the runs made (none for cells already there)."""
    table = collect.collect(session_dir)
    uri, artifacts = (tracking_uri, None) if tracking_uri else default_uri(session_dir.parent)
    client = _client(uri)
    experiment = _experiment(client, artifacts)
    session = session_dir.name
    existing = {
        r.data.tags.get("reprokit.cell")
        for r in client.search_runs([experiment], filter_string=f"tags.`reprokit.run.session` = '{session}'")
    }
    made: list[str] = []
    parent = None
    if session not in existing:
        parent = client.create_run(
            experiment, run_name=session, tags={"reprokit.run.session": session, "reprokit.cell": session}
        )
        for name in ("report.html", "report.md", "results.csv", "session.json"):
            if (session_dir / name).exists():
                client.log_artifact(parent.info.run_id, str(session_dir / name))
        client.set_terminated(parent.info.run_id)
        made.append(parent.info.run_id)
    for row in table:
        if row["cell_id"] in existing or not row.get("run_dir"):
            continue
        run_dir = session_dir / "runs" / row["run_dir"]
        cell = json.loads((run_dir / "cell.json").read_text()) if (run_dir / "cell.json").exists() else {}
        tags = _tags(row, session)
        if parent is not None:
            tags["mlflow.parentRunId"] = parent.info.run_id
        run = client.create_run(experiment, run_name=row["cell_id"], tags=tags)
        run_id = run.info.run_id
        for key, value in _params(row, cell).items():
            client.log_param(run_id, key, value)
        for step in _steps(run_dir):
            for metric in ("samples_per_second", "loss"):
                if step.get(metric) not in (None, ""):
                    client.log_metric(run_id, metric, float(step[metric]), step=int(step["step"]))
        for metric in ("measured", "measured_per_device", "ratio_per_device", "measured_after_warmup",
                       "measured_whole_run", "measured_gaudi_trainer", "mfu", "peak_memory_bytes"):  # fmt: skip
            if isinstance(row.get(metric), int | float):
                client.log_metric(run_id, f"result.{metric}", float(row[metric]))
        client.set_terminated(run_id, status="FINISHED" if row.get("status") == "ok" else "FAILED")
        made.append(run_id)
    return uri, made
