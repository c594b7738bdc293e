"""What one cell's MLflow run holds: its parameters (the trainer's arguments, scale, accelerator,
devices) and tags (session, cell, verdict, provenance) within MLflow's limits, its per-step curves and
the summary's numbers as metrics, logged in as few `log_batch` calls as MLflow's limits per call allow."""

from __future__ import annotations

import json
import re
from typing import Any

from reprokit.judge.result_row import Row

PARAM_LIMIT = 500  # MLflow's limit on a parameter's value
KEY_LIMIT = 250  # and on a parameter's or a tag's name
TAG_LIMIT = 5000  # and on a tag's value


def key(name: str) -> str:
    """A parameter's name as MLflow takes one (letters, digits, _ - . / and spaces; 250 at most)."""
    return re.sub(r"[^\w\-. /]", "_", name, flags=re.ASCII)[:KEY_LIMIT]


def params(row: Row, cell: dict[str, Any]) -> dict[str, str]:
    """A cell's run's parameters: the trainer's arguments as cell.json gives them, and the row's setup."""
    args = cell.get("args") if isinstance(cell.get("args"), dict) else {}
    flat = {key(f"arg.{k}"): v for k, v in args.items()}
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


def tags(row: Row, session: str) -> dict[str, str]:
    """A cell's run's tags: its session, cell and verdict, its series, why it was kept, its provenance."""
    found = {
        "reprokit.run.session": session,
        "reprokit.cell": str(row.cell_id),
        "reprokit.verdict": str(row.verdict),
    }
    if len(row.repetitions) > 1:  # a series: its numbers are the median of these runs
        found["reprokit.repeats"] = str(row.repeats)
        found["reprokit.runs"] = ",".join(str(r.get("cell_id")) for r in row.repetitions)
    if row.kept is not None:  # not read again from its run directory: why
        found["reprokit.kept"] = row.kept
    found.update({key(f"provenance.{k}"): str(v) for k, v in row.provenance.items() if v is not None})
    return {k: v[:TAG_LIMIT] for k, v in found.items()}


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


def metrics(row: Row, curves: dict[str, list[tuple[int, float]]], now_ms: int) -> list[Any]:
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


def log_batches(client, run_id: str, metrics: list[Any], params: list[Any], tags: list[Any]) -> None:
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
