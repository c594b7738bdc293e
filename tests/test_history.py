"""Results over time: sessions in one results folder are one store (no import step), read back as a
history, compared cell by cell with what changed between them, repeated to tell a change from noise,
and exported to MLflow."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import run_inv
from tests.fakes import fake_env, fake_recipe

CPU_SMOKE = ("--accelerator", "cpu", "--scale", "smoke", "--runtime", "local")


def _session(results, recipe, *extra: str) -> str:
    done = run_inv("run", str(recipe), *CPU_SMOKE, "--out", str(results), *extra, env=fake_env())
    assert done.returncode == 0, done.stderr
    return sorted(p.name for p in results.iterdir() if (p / "results.jsonl").exists())[-1]


@pytest.fixture
def two_sessions(tmp_path):
    """The same recipe twice; the second's `fast` variant is 30% slower (a planted regression)."""
    results = tmp_path / "results"
    before = fake_recipe(
        tmp_path / "a.yaml",
        [
            {"name": "base", "baseline": True, "args": {"fake_rate": 100}},
            {"name": "fast", "args": {"fake_rate": 200}},
        ],
    )
    first = _session(results, before)
    after = fake_recipe(
        tmp_path / "b.yaml",
        [
            {"name": "base", "baseline": True, "args": {"fake_rate": 101}},
            {"name": "fast", "args": {"fake_rate": 140}},
        ],
    )
    second = _session(results, after)
    return results, first, second


def test_history_lists_every_session_and_writes_a_page_of_plots(two_sessions):
    results, first, second = two_sessions
    shown = run_inv("history", "all", "--results", str(results))
    assert shown.returncode == 0, shown.stderr
    assert first in shown.stdout and second in shown.stdout and "fake--fast" in shown.stdout
    page = results / "history.html"
    assert shown.stdout.strip().splitlines()[-1] == str(page)
    assert page.read_text().count("data:image/png;base64,") == 2  # a plot per cell
    # A deleted session is gone from the store with its folder: nothing to re-import.
    shutil.rmtree(results / first)
    again = run_inv("history", "all", "--results", str(results), "--cell", "fast")
    assert first not in again.stdout and second in again.stdout and "fake--base" not in again.stdout
    # The recipe as a positional word, as in every task that takes one.
    assert "fake--fast" in run_inv("history", "fake", "--results", str(results)).stdout
    other = run_inv("history", "volo", "--results", str(results))
    assert other.returncode == 2 and "no completed cell" in other.stderr


def test_compare_gives_a_ratio_and_verdict_per_cell_and_what_changed(two_sessions):
    results, first, second = two_sessions
    compared = run_inv("compare", "-a", first, "-b", second, "--results", str(results))
    assert compared.returncode == 0, compared.stderr
    lines = {line.split("│")[1].strip(): line for line in compared.stdout.splitlines() if "│ fake--" in line}
    assert "0.700" in lines["fake--fast"] and "regressed" in lines["fake--fast"]
    assert "1.010" in lines["fake--base"] and "same" in lines["fake--base"]
    assert "recipe_hash" in compared.stdout  # the recipe files differ between the two sessions
    # latest and previous name the two newest sessions.
    assert run_inv("compare", "--results", str(results)).stdout == compared.stdout
    # Two session folders need no results folder.
    by_folder = subprocess.run(
        [sys.executable, "-m", "reprokit", "compare", "-a", str(results / first), "-b", str(results / second)],
        cwd=results.parent.parent, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert by_folder.returncode == 0, by_folder.stderr
    assert "regressed" in by_folder.stdout


def test_fail_on_regression_fails_only_beyond_its_threshold(two_sessions):
    results, first, second = two_sessions
    failed = run_inv("compare", "-a", first, "-b", second, "--results", str(results), "--fail-on-regression", "10")
    assert failed.returncode == 2
    assert failed.stderr.strip().splitlines()[-1] == (
        "reprokit: 1 cell(s) regressed by more than 10%: fake--fast (0.70x)"
    )
    assert (
        run_inv("compare", "-a", first, "-b", second, "--results", str(results), "--fail-on-regression", "40").returncode
        == 0
    )
    assert (
        run_inv("compare", "-a", first, "-b", first, "--results", str(results), "--fail-on-regression", "1").returncode
        == 0
    )


def test_repeated_runs_give_median_and_spread_and_the_verdict_uses_the_median(tmp_path):
    results = tmp_path / "results"
    recipe = fake_recipe(
        tmp_path / "r.yaml",
        [
            {
                "name": "v",
                "baseline": True,
                "args": {"fake_rate": 100},
                "references": [{"device": "cpu", "devices": 1, "value": 100, "definition": "after_warmup"}],
            }
        ],
    )
    name = _session(results, recipe, "--repeat", "3")
    session = results / name
    assert sorted(p.name for p in (session / "runs").iterdir()) == [
        "fake--v--r1",
        "fake--v--r2",
        "fake--v--r3",
    ]
    (row,) = csv.DictReader(io.StringIO((session / "results.csv").read_text()))
    assert row["cell_id"] == "fake--v" and row["repeats"] == "3"
    assert (
        float(row["measured"]) == 100.0 and float(row["measured_min"]) == float(row["measured_max"]) == 100.0
    )
    assert float(row["spread"]) == 0.0
    (jsonl,) = [json.loads(line) for line in (session / "results.jsonl").read_text().splitlines()]
    assert [r["cell_id"] for r in jsonl["repetitions"]] == ["fake--v--r1", "fake--v--r2", "fake--v--r3"]
    assert "(median of 3, 100.00 to 100.00)" in (session / "report.md").read_text()


def test_an_mlflow_export_is_read_back_by_mlflows_own_client(two_sessions):
    mlflow = pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    results, first, _ = two_sessions
    exported = run_inv("export-results", str(results / first))
    assert exported.returncode == 0, exported.stderr
    uri = f"sqlite:///{results.resolve() / 'mlflow.db'}"
    assert exported.stdout.strip() == f"3 runs logged to {uri}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("reprokit")
    runs = {r.data.tags["reprokit.cell"]: r for r in client.search_runs([experiment.experiment_id])}
    assert set(runs) == {first, "fake--base", "fake--fast"}
    fast = runs["fake--fast"]
    assert fast.data.params["variant"] == "fast" and fast.data.params["arg.fake_rate"] == "200"
    assert fast.data.metrics["result.measured"] == 200.0
    steps = client.get_metric_history(fast.info.run_id, "samples_per_second")
    assert [m.step for m in steps] == [1, 2, 3, 4, 5, 6]
    assert fast.data.tags["mlflow.parentRunId"] == runs[first].info.run_id
    assert {a.path for a in client.list_artifacts(runs[first].info.run_id)} >= {"report.html", "results.csv"}
    assert mlflow.__version__
    again = run_inv("export-results", str(results / first))
    assert again.stdout.strip().startswith("0 runs logged")
