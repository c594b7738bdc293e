"""Results over time: sessions in one results folder are one store (no import step), read back as a
history, compared cell by cell with what changed between them, repeated to tell a change from noise,
and exported to MLflow."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from datetime import datetime, timedelta, timezone

import pytest

from tests import faultfs
from tests.conftest import INV, ROOT, run_inv
from tests.fakes import fake_env, fake_recipe
from tests.faultfs import needs_namespaces
from tests.inprocess import run_command

CPU_SMOKE = ("--accelerator", "cpu", "--scale", "smoke", "--runtime", "local")


def _session(results, recipe, *extra: str) -> str:
    done = run_inv("run", str(recipe), *CPU_SMOKE, "--results", str(results), *extra, env=fake_env())
    assert done.returncode == 0, done.stderr
    return sorted(p.name for p in results.iterdir() if (p / "results.jsonl").exists())[-1]


@pytest.fixture(scope="module")
def two_sessions_made(tmp_path_factory):
    """The same recipe twice; the second's `fast` variant is 30% slower (a planted regression). Made once
    for the module: each test takes a copy (two_sessions)."""
    made = tmp_path_factory.mktemp("two-sessions")
    results = made / "results"
    before = fake_recipe(
        made / "a.yaml",
        [
            {"name": "base", "baseline": True, "args": {"fake_rate": 100}},
            {"name": "fast", "args": {"fake_rate": 200}},
        ],
    )
    first = _session(results, before)
    after = fake_recipe(
        made / "b.yaml",
        [
            {"name": "base", "baseline": True, "args": {"fake_rate": 101}},
            {"name": "fast", "args": {"fake_rate": 140}},
        ],
    )
    second = _session(results, after)
    return results, first, second


@pytest.fixture
def two_sessions(two_sessions_made, tmp_path):
    """A copy of the two sessions' results folder, the test's own to change (a session deleted, an export)."""
    made, first, second = two_sessions_made
    results = tmp_path / "results"
    shutil.copytree(made, results, symlinks=True)
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
    by_folder = run_command("compare", "-a", str(results / first), "-b", str(results / second),
                            program="reprokit", cwd=results.parent.parent)  # fmt: skip
    assert by_folder.returncode == 0, by_folder.stderr
    assert "regressed" in by_folder.stdout


def test_fail_on_regression_fails_only_beyond_its_threshold(two_sessions):
    results, first, second = two_sessions
    # One run per cell: the gate needs the run-to-run spread the user accepts.
    noise = ("--noise", "5")
    failed = run_inv(
        "compare", "-a", first, "-b", second, "--results", str(results), "--fail-on-regression", "10", *noise
    )
    assert failed.returncode == 1  # a failed gate, as --help says; 2 is a usage error
    assert failed.stderr.strip().splitlines()[-1] == (
        "reprokit: 1 cell(s) regressed by more than 10%: fake--fast (0.70x) (2 of 2 cell(s) judged)"
    )
    assert (
        run_inv("compare", "-a", first, "-b", second, "--results", str(results), "--fail-on-regression", "40",
                *noise).returncode
        == 0
    )  # fmt: skip
    assert (
        run_inv("compare", "-a", first, "-b", first, "--results", str(results), "--fail-on-regression", "1",
                *noise).returncode
        == 0
    )  # fmt: skip


def test_single_runs_say_their_spread_is_unknown_and_gate_only_with_a_noise_band(two_sessions):
    results, first, second = two_sessions
    compared = run_inv("compare", "-a", first, "-b", second, "--results", str(results))
    assert compared.returncode == 0, compared.stderr
    lines = {line.split("│")[1].strip(): line for line in compared.stdout.splitlines() if "│ fake--" in line}
    assert "regressed (one run on a side: its spread is unknown)" in lines["fake--fast"]
    assert "same (within ±5%; one run on a side: its spread is unknown)" in lines["fake--base"]
    gated = run_inv(
        "compare", "-a", first, "-b", second, "--results", str(results), "--fail-on-regression", "10"
    )
    assert gated.returncode == 2
    assert gated.stderr.strip().splitlines()[-1] == (
        "reprokit: --fail-on-regression on single runs needs --noise PCT (the run-to-run spread you accept on "
        "this machine), or sessions run with --repeat 3: fake--base, fake--fast ran once on a side"
    )
    # A noise band wider than the change: the same two numbers are `same`.
    wide = run_inv("compare", "-a", first, "-b", second, "--results", str(results), "--noise", "35")
    assert "same (within the noise band ±35% given for single runs)" in wide.stdout


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
    # Exported as one MLflow run with the median (it was left out: a series' row has no run directory).
    mlflow = pytest.importorskip("mlflow.tracking")
    exported = run_inv("export-results", str(session))
    assert exported.returncode == 0 and exported.stdout.startswith("2 runs logged"), exported.stdout
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{results.resolve() / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("reprokit")
    runs = {r.data.tags["reprokit.cell"]: r for r in client.search_runs([experiment.experiment_id])}
    series = runs["fake--v"]
    assert series.data.metrics["result.measured"] == 100.0 and series.data.params["arg.fake_rate"] == "100"
    assert series.data.tags["reprokit.repeats"] == "3"
    assert series.data.tags["reprokit.runs"] == "fake--v--r1,fake--v--r2,fake--v--r3"
    assert client.get_metric_history(series.info.run_id, "samples_per_second")


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


def _new_session(results, recipe, env: dict | None = None) -> str:
    """Run one session; the name of the folder it made (whatever its name sorts as)."""
    before = set(results.iterdir()) if results.exists() else set()
    done = run_inv(
        "run", str(recipe), *CPU_SMOKE, "--results", str(results), env={**fake_env(), **(env or {})}
    )
    assert done.returncode == 0, done.stderr
    (made,) = set(results.iterdir()) - before
    return made.name


def test_latest_previous_and_history_follow_when_sessions_started_not_their_folder_names(tmp_path):
    """A session made in Tokyo, then one made in UTC seconds later: the first one's folder name (its
    local time) sorts after the second's, yet it is the earlier session."""
    results = tmp_path / "results"
    tokyo = _new_session(results, fake_recipe(tmp_path / "a.yaml", [{"name": "v", "args": {"fake_rate": 100}}]),
                         {"TZ": "JST-9"})  # fmt: skip
    utc = _new_session(results, fake_recipe(tmp_path / "b.yaml", [{"name": "v", "args": {"fake_rate": 50}}]),
                       {"TZ": "UTC0"})  # fmt: skip
    assert tokyo > utc  # by name
    stored = json.loads((results / utc / "session.json").read_text())
    assert stored["created_at"].endswith("+00:00")
    compared = run_inv("compare", "--results", str(results), "--noise", "5")
    assert compared.returncode == 0, compared.stderr
    assert f"A = {tokyo}, B = {utc}" in compared.stdout
    (line,) = [line for line in compared.stdout.splitlines() if "│ fake--v" in line]
    assert "0.500" in line and "regressed" in line
    shown = run_inv("history", "all", "--results", str(results))
    assert shown.returncode == 0, shown.stderr
    order = [line.split()[0] for line in shown.stdout.splitlines() if line.startswith((tokyo, utc))]
    assert order == [tokyo, utc]


def test_the_history_plot_puts_sessions_on_a_time_axis_whatever_their_host():
    """Sessions alternating between two hosts are placed by when they started, not grouped by host."""
    from matplotlib.dates import ConciseDateFormatter

    from reprokit.judge.result_row import Row
    from reprokit.report import history, history_plots

    start = datetime(2025, 1, 1, tzinfo=timezone.utc)
    table = [
        history.Entry(f"s{i:02d}", start + timedelta(hours=i), None, "a" if i % 2 else "b",
                      Row(cell_id="c", unit="img/s", device_name="H100", measured_per_device=100.0 + i))
        for i in range(1, 9)
    ]  # fmt: skip
    fig, unnamed = history_plots.figure("c", table)
    ax = fig.axes[0]
    points = sorted((x, y) for line in ax.get_lines() for x, y in zip(line.get_xdata(orig=False), line.get_ydata(),
                                                                       strict=True))  # fmt: skip
    assert [y for _, y in points] == [101.0 + i for i in range(8)]  # time order, both hosts interleaved
    gaps = {round((b - a) * 24, 6) for (a, _), (b, _) in zip(points, points[1:], strict=False)}
    assert gaps == {1.0}  # an hour apart on the axis, as they were
    assert isinstance(ax.xaxis.get_major_formatter(), ConciseDateFormatter) and unnamed == 0
    assert {t.get_text() for t in fig.legends[0].get_texts()} == {"H100 on a", "H100 on b"}


def test_a_history_plot_says_error_bars_only_under_a_plot_that_draws_them(tmp_path):
    """Single runs have no spread to draw: their plot says nothing of error bars; a cell run three times
    with a spread has its bars and the note, once."""
    from reprokit.judge.result_row import Row
    from reprokit.report import history, history_plots

    start = datetime(2025, 1, 1, tzinfo=timezone.utc)
    runs = [{"status": "ok", "measured": value} for value in (90.0, 100.0, 110.0)]
    repeated = dict(
        repeats=3, repetitions=runs, measured=100.0, measured_min=90.0, measured_max=110.0, spread=0.2
    )
    table = [
        history.Entry(f"s{i}", start + timedelta(hours=i), None, "dgx-01",
                      Row(cell_id=cell, unit="img/s", device_name="H100", measured_per_device=100.0, **extra))
        for i in range(3)
        for cell, extra in (("fake--once", {}), ("fake--thrice", repeated))
    ]  # fmt: skip
    captions = {plot.recipe: plot.caption for plot in history_plots.plots(table, tmp_path)}
    assert captions == {"fake--once": "", "fake--thrice": "Error bars: the spread of repeated runs."}
    bars = {cell: history_plots.figure(cell, [e for e in table if e.row.cell_id == cell])[0].axes[0].collections
            for cell in captions}  # fmt: skip
    assert not bars["fake--once"] and bars["fake--thrice"]
    page = history.write(tmp_path, table).read_text()
    assert page.count("Error bars") == 1 and page.count("data:image/png;base64,") == 2


def _copy_session(source, target, created_at: str, rate: float | None = None):
    shutil.copytree(source, target)
    stored = json.loads((target / "session.json").read_text())
    stored["created_at"] = created_at
    (target / "session.json").write_text(json.dumps(stored))
    if rate is not None:
        rows = [json.loads(line) for line in (target / "results.jsonl").read_text().splitlines()]
        for row in rows:
            row["measured_per_device"] = row["measured"] = rate
        (target / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return target


def test_one_bad_session_is_skipped_with_its_reason_and_every_other_one_still_reads(tmp_path):
    # A results folder whose name would be a glob pattern: taken literally, its sibling never read.
    team = tmp_path / "team?[1]"
    made = _new_session(team, fake_recipe(tmp_path / "a.yaml", [{"name": "v", "args": {"fake_rate": 100}}]))
    good = _copy_session(team / made, team / "good", "2025-01-01T10:00:00+00:00")
    shutil.rmtree(team / made)
    _copy_session(good, team / "later", "2025-01-02T10:00:00+00:00", rate=90.0)
    # "team?[1]" as a glob matches "teamX1": a store that globbed would list this session too.
    _copy_session(good, tmp_path / "teamX1" / "sibling", "2025-01-03T10:00:00+00:00")
    truncated = _copy_session(good, team / "trunc", "2025-01-01T11:00:00+00:00")
    text = (truncated / "results.jsonl").read_text()
    (truncated / "results.jsonl").write_text(text + text[: len(text) // 2])
    latin = _copy_session(good, team / "latin1", "2025-01-01T12:00:00+00:00")
    (latin / "results.jsonl").write_bytes(b'{"cell_id": "caf\xe9"}\n')
    shutil.copytree(good, os.fsdecode(os.fsencode(team) + b"/bad\xffname"))
    (team / "empty").mkdir()
    (team / "loop").symlink_to(team / "loop")
    listy = _copy_session(good, team / "listy", "2025-01-01T13:00:00+00:00")
    (listy / "session.json").write_text("[]")
    binary = _copy_session(good, team / "binary", "2025-01-01T14:00:00+00:00")
    (binary / "session.json").write_bytes(b"\xff\xfe")

    shown = run_inv("history", "all", "--results", str(team))
    assert shown.returncode == 0, shown.stderr
    listed = {line.split()[0] for line in shown.stdout.splitlines() if "fake--v" in line}
    assert listed == {"good", "later"}
    # Each session left out is one line: the file (or folder) and why.
    assert shown.stderr.strip().splitlines() == [
        f"skipped: {team}/bad\\xffname: its folder name is not UTF-8",
        f"skipped: {binary}/session.json: not UTF-8 (byte 0xff at offset 0)",
        f"skipped: {team}/empty: an empty folder",
        f"skipped: {latin}/results.jsonl: not UTF-8 (byte 0xe9 at offset 16)",
        f"skipped: {listy}/session.json: a JSON list, not an object",
        f"skipped: {team}/loop: a link loop",
        f"skipped: {truncated}/results.jsonl: truncated at line 2",
    ]
    # Two good sessions compare, whatever lies beside them; a bad one is refused in one line.
    compared = run_inv("compare", "-a", "good", "-b", "later", "--results", str(team), "--noise", "5")
    assert compared.returncode == 0, compared.stderr
    assert "0.900" in compared.stdout
    refused = run_inv("compare", "-a", "good", "-b", "trunc", "--results", str(team))
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"reprokit: session trunc cannot be read: {truncated}/results.jsonl: truncated at line 2"
    )
    # A session.json that is not an object (or not UTF-8) does not stop its report: the report is
    # made from the run directories, and says what it left out.
    for name in ("listy", "binary"):
        reported = run_inv("report", name, "--results", str(team))
        assert reported.returncode == 0 and "Traceback" not in reported.stderr, reported.stderr
        assert reported.stderr.startswith(f"skipped: {team / name}/session.json: "), reported.stderr


@needs_namespaces
def test_history_reads_a_read_only_results_folder_and_writes_nothing_there(two_sessions):
    results, first, second = two_sessions
    before = sorted(str(p.relative_to(results)) for p in results.rglob("*"))
    shown = faultfs.run(
        [*INV, "history", "all", "--results", str(results)], read_only=[results], cwd=ROOT,
        capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert first in shown.stdout and second in shown.stdout
    assert shown.stderr.strip() == (
        f"history.html not written: {results / 'history.html'}: Read-only file system (EROFS)"
    )
    assert sorted(str(p.relative_to(results)) for p in results.rglob("*")) == before


def test_an_interrupted_mlflow_export_is_finished_by_the_next_one(two_sessions, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from reprokit.report import export_mlflow

    results, first, _ = two_sessions
    real = MlflowClient.log_batch
    calls = []

    def cut_short(self, *args, **kwargs):
        calls.append(args)
        if len(calls) == 1:  # the first cell's values, its run made and not yet terminated: Ctrl-C
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", cut_short)
    with pytest.raises(KeyboardInterrupt):
        export_mlflow.export(results / first)
    monkeypatch.setattr(MlflowClient, "log_batch", real)
    uri = f"sqlite:///{results.resolve() / 'mlflow.db'}"
    again = run_inv("export-results", str(results / first))
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == (
        f"2 runs logged to {uri} (1 unfinished run(s) of an interrupted export deleted and made again)"
    )
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("reprokit").experiment_id])
    assert sorted(r.data.tags["reprokit.cell"] for r in runs) == sorted([first, "fake--base", "fake--fast"])
    assert {r.info.status for r in runs} == {"FINISHED"}
    base = next(r for r in runs if r.data.tags["reprokit.cell"] == "fake--base")
    assert [m.step for m in client.get_metric_history(base.info.run_id, "samples_per_second")] == [
        1,
        2,
        3,
        4,
        5,
        6,
    ]


def test_a_sqlite_tracking_uri_keeps_its_artifacts_beside_it_not_where_the_command_ran(
    two_sessions, tmp_path
):
    pytest.importorskip("mlflow")
    results, first, _ = two_sessions
    store, elsewhere = tmp_path / "team-store", tmp_path / "elsewhere"
    store.mkdir()
    elsewhere.mkdir()
    done = run_command("export-results", str(results / first), "--tracking-uri", f"sqlite:///{store / 'mlflow.db'}",
                       program="reprokit", cwd=elsewhere)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert list(elsewhere.iterdir()) == []
    assert [p.name for p in (store / "mlartifacts").rglob("report.html")] == ["report.html"]


@needs_namespaces
def test_a_read_only_session_exports_to_a_store_elsewhere_and_is_not_written(two_sessions, tmp_path):
    pytest.importorskip("mlflow")
    results, first, _ = two_sessions
    before = sorted(str(p.relative_to(results)) for p in results.rglob("*"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    refused = faultfs.run([*INV, "export-results", str(results / first)], read_only=[results], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"reprokit: the results folder {results.resolve()} cannot be written, and the default MLflow store lives "
        "there (mlflow.db): give --tracking-uri (sqlite:///elsewhere/mlflow.db, or a server)"
    )
    store = tmp_path / "store"
    store.mkdir()
    done = faultfs.run(
        [*INV, "export-results", str(results / first), "--tracking-uri", f"sqlite:///{store / 'mlflow.db'}"],
        read_only=[results], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("3 runs logged to sqlite:///")
    assert sorted(str(p.relative_to(results)) for p in results.rglob("*")) == before
