"""`inv export-results --to mlflow` of a 1,000-step run into a SQLite store: the time of the export
(`export_mlflow.export`, the session's parent run and one cell's run with its 29 parameters, 1,000 steps
of samples/s, loss and the breakdown's four shares, its result numbers), the store made beforehand
(MLflow's schema migrations are a one-off of the store, not of an export). The target: under 3 s.

The session is the committed results fixture's BridgeTower cell (tests/fixtures/results_session) with
a throughput.csv of 1,000 logging steps written into it; each round exports a copy under its own name.
"""

from __future__ import annotations

import csv
import json
import shutil
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "results_session" / "20250102-030405"
CELL = "bridgetower--workers0"
STEPS = 1000
TARGET_S = 3.0


def session(results: Path, name: str) -> Path:
    """A session folder of the fixture's one cell, with a throughput.csv of STEPS rows."""
    folder = results / name
    shutil.copytree(FIXTURE / "runs" / CELL, folder / "runs" / CELL)
    stored = json.loads((FIXTURE / "session.json").read_text())
    stored["cells"] = [c for c in stored["cells"] if c["cell_id"] == CELL]
    stored["session"] = name
    (folder / "session.json").write_text(json.dumps(stored))
    fields = ["step", "samples_per_second", "loss", "data_wait", "compute", "communication", "other"]
    with open(folder / "runs" / CELL / "throughput.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fields)
        writer.writeheader()
        for step in range(1, STEPS + 1):
            writer.writerow({"step": step, "samples_per_second": 300 + step % 7, "loss": 2.0 / step,
                             "data_wait": 0.1, "compute": 0.85, "communication": "", "other": 0.05})  # fmt: skip
    return folder


def run(repeats: int = 3) -> list[dict]:
    from reprokit.report import export_mlflow

    with tempfile.TemporaryDirectory(prefix="reprokit-mlflow-bench-") as tmp:
        results = Path(tmp) / "results"
        uri = f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        started = time.perf_counter()
        export_mlflow.export(session(results, "warm-up"), uri)  # makes the store: its migrations
        store_s = time.perf_counter() - started
        times = []
        for round_ in range(repeats):
            folder = session(results, f"round-{round_}")
            started = time.perf_counter()
            done = export_mlflow.export(folder, uri)
            times.append(time.perf_counter() - started)
            assert len(done.made) == 2, done  # the session's run and the cell's
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        (cell,) = [r for r in client.search_runs([client.get_experiment_by_name("reprokit").experiment_id])
                   if r.data.tags.get("reprokit.cell") == CELL and r.data.tags["reprokit.run.session"] == "round-0"]  # fmt: skip
        logged = len(client.get_metric_history(cell.info.run_id, "samples_per_second"))
    best = min(times)
    return [
        {
            "suite": "mlflow",
            "steps": STEPS,
            "params": len(cell.data.params),
            "samples_per_second_points": logged,
            "store_made_s": store_s,
            "export_s_best": best,
            "export_s_worst": max(times),
            "target_s": TARGET_S,
            "within": "yes" if best < TARGET_S else "NO",
        }
    ]
