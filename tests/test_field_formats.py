"""A run speaks the field's formats, read back by the field's own tools: a smoke session's MLPerf log
(mlperf_logging's parser and compliance checker, with the rules that hold for any benchmark), its
systems in MLPerf's description fields (mlperf_logging's system_desc checker), TensorBoard's hparams,
breakdown, power and energy (TensorBoard's own event reader), and the step-time percentiles in
summary.json, results.csv and the report."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_inv

pytest.importorskip("torch")
pytest.importorskip("tensorboard")
mlperf_logging = pytest.importorskip("mlperf_logging")

CELL = "vit-speedups--baseline"
RULES = ROOT / "tests" / "mllog_rules.yaml"


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Path:
    """One smoke session of the ViT ladder's baseline, run through the kit as a user runs it."""
    results = tmp_path_factory.mktemp("formats") / "results"
    done = run_inv("run", "vit-speedups", "--accelerator", "cpu", "--scale", "smoke", "--runtime", "local",
                   "--container", "none", "--variant", "baseline", "--results", str(results))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (found,) = results.iterdir()
    return found


def check_mllog(path: Path) -> tuple[list, bool, str]:
    """(the parsed lines, whether the compliance checker passed our rules, what it said)."""
    from mlperf_logging.compliance_checker import mlp_compliance, mlp_parser

    lines, errors = mlp_parser.parse_file(str(path), ruleset="5.1.0")
    assert errors == [], errors
    checker = mlp_compliance.make_checker("training", "5.1.0", quiet=False, werror=True)
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger().addHandler(handler)
    try:
        passed = checker.check_file(str(path), str(RULES))
    finally:
        logging.getLogger().removeHandler(handler)
    return lines, passed, "\n".join(said)


def test_the_mlperf_log_parses_and_keeps_the_rules_of_any_benchmark(session):
    log = session / "runs" / CELL / "mlperf.log"
    lines, passed, said = check_mllog(log)
    assert passed, said
    keys = [line.key for line in lines]
    assert keys.index("init_start") < keys.index("run_start") < keys.index("run_stop") == len(keys) - 1
    assert keys.count("block_start") == keys.count("block_stop") >= 1
    summary = json.loads((session / "runs" / CELL / "summary.json").read_text())
    stats = [line.value for line in lines if line.key == "tracked_stats"]
    # The last throughput line is the summary's after-warm-up figure; the blocks count every sample.
    assert stats[-1]["value"]["throughput"] == pytest.approx(summary["throughput"]["after_warmup"]["value"])
    assert stats[-1]["metadata"]["definition"] == "after_warmup"
    stops = [line.value["metadata"]["samples_count"] for line in lines if line.key == "block_stop"]
    assert stops[-1] == summary["samples"]
    assert (
        next(line.value["value"] for line in lines if line.key == "global_batch_size")
        == summary["global_batch_size"]
    )
    assert next(line.value for line in lines if line.key == "run_stop")["metadata"]["status"] == "success"
    assert next(line.value["value"] for line in lines if line.key == "submission_benchmark") == "vit-speedups"


def test_the_rules_catch_a_log_that_breaks_them(session, tmp_path):
    # The checker is not a formality: a run_stop before run_start, and a block without its count, fail.
    lines = (session / "runs" / CELL / "mlperf.log").read_text().splitlines()
    stop = next(line for line in lines if '"run_stop"' in line)
    broken = tmp_path / "broken.log"
    broken.write_text("\n".join([stop, *[line for line in lines if line != stop]]) + "\n")
    _, passed, said = check_mllog(broken)
    assert not passed and "run_stop" in said
    uncounted = tmp_path / "uncounted.log"
    uncounted.write_text("\n".join(line.replace('"samples_count"', '"count"') for line in lines) + "\n")
    _, passed, said = check_mllog(uncounted)
    assert not passed and "block_start" in said


def test_each_system_of_the_session_is_described_in_mlperfs_fields(session):
    from mlperf_logging.system_desc_checker.system_desc_checker import check_system_desc

    (described,) = (session / "systems").glob("*.json")
    valid, name, _, _ = check_system_desc(str(described), "training", "5.1.0")
    assert valid, described.read_text()
    found = json.loads(described.read_text())
    sysinfo = json.loads((session / "runs" / CELL / "sysinfo.json").read_text())
    # The node's own readings, in MLPerf's names.
    assert found["host_processor_vcpu_count"] == str(sysinfo["hardware"]["host_processor_vcpu_count"])
    assert found["number_of_nodes"] == "1" and found["framework"].startswith("PyTorch ")
    assert name == found["system_name"] and found["accelerator_model_name"] == "none"


def _events(folder: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def test_tensorboard_shows_the_runs_hparams_breakdown_and_energy(session):
    from tensorboard.plugins.hparams import plugin_data_pb2

    run = session / "runs" / CELL / "tensorboard" / "throughput"
    events = _events(run)
    tags = set(events.Tags()["scalars"])
    assert {
        "throughput/samples_per_second",
        "breakdown/data_wait",
        "breakdown/compute",
        "breakdown/other",
    } <= tags
    summary = json.loads((session / "runs" / CELL / "summary.json").read_text())
    shares = [point.value for point in events.Scalars("breakdown/compute")]
    rows = list(csv.DictReader((session / "runs" / CELL / "throughput.csv").open()))
    assert shares == pytest.approx([float(r["compute"]) for r in rows], abs=1e-4)
    # The hparams plugin's session: the cell's arguments and the software that ran, with its figures.
    content = events.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(
        content["_hparams_/session_start_info"]
    ).session_start_info
    hparams = {key: value.ListFields()[0][1] for key, value in start.hparams.items()}
    cell = json.loads((session / "runs" / CELL / "cell.json").read_text())
    assert hparams["cell_id"] == CELL and hparams["variant"] == "baseline"
    assert hparams["arg.amp"] == cell["args"]["amp"]
    assert hparams["software.optimizer"] == summary["software"]["optimizer"]
    assert [p.value for p in events.Scalars("hparams/samples_per_second")] == pytest.approx(
        [summary["samples_per_second"]]
    )
    if summary.get("energy_joules") is not None:  # RAPL where this machine lets the run read it
        assert "energy/joules" in tags
    # And `inv collect` gathers them where `tensorboard --logdir results/<session>/tensorboard` looks.
    assert list((session / "tensorboard" / CELL).rglob("events.out.tfevents.*"))


def test_step_time_percentiles_are_in_the_summary_the_table_and_the_report(session):
    summary = json.loads((session / "runs" / CELL / "summary.json").read_text())
    times = summary["step_time_s"]
    assert 0 < times["p50"] <= times["p90"] <= times["p99"]
    assert times["steps"] == summary["steps"] - summary["warmup_steps"] and times["basis"] == "host clock"
    (row,) = csv.DictReader((session / "results.csv").open())
    assert [float(row[f"step_time_{q}_s"]) for q in ("p50", "p90", "p99")] == pytest.approx(
        [times["p50"], times["p90"], times["p99"]]
    )
    report = (session / "report.md").read_text()
    line = next(line for line in report.splitlines() if line.startswith("| step time p50 / p90 / p99"))
    assert f"{times['p50'] * 1e3:,.1f} / " in line


def test_the_mlflow_export_carries_energy_breakdown_step_times_and_the_git_commit(tmp_path):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from tests.fakes import fake_env, fake_recipe

    recipe = fake_recipe(
        tmp_path / "fake.yaml",
        [{"name": "v", "baseline": True,
          "args": {"fake_steps": 30, "fake_data_wait": 0.25, "fake_samples_per_joule": 2.0}}],
    )  # fmt: skip
    results = tmp_path / "results"
    done = run_inv("run", str(recipe), "--accelerator", "cpu", "--scale", "smoke", "--runtime", "local",
                   "--results", str(results), env=fake_env())  # fmt: skip
    assert done.returncode == 0, done.stderr
    (folder,) = results.iterdir()
    exported = run_inv("export-results", str(folder))
    assert exported.returncode == 0, exported.stderr
    client = MlflowClient(tracking_uri=f"sqlite:///{results.resolve() / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("reprokit").experiment_id
    runs = {r.data.tags["reprokit.cell"]: r for r in client.search_runs([experiment])}
    cell = runs["fake--v"]
    (row,) = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    assert cell.data.tags["mlflow.source.git.commit"] == row["kit_revision"]
    assert runs[folder.name].data.tags["mlflow.source.git.commit"] == row["kit_revision"]
    metrics = cell.data.metrics
    assert metrics["result.samples_per_joule"] == 2.0 and metrics["result.data_wait_share"] == 0.25
    assert metrics["result.energy_joules"] == pytest.approx(8.0)
    history = client.get_metric_history(cell.info.run_id, "samples_per_second")
    assert [m.step for m in history] == list(range(1, 31))
    assert cell.data.params["variant"] == "v" and cell.data.params["arg.fake_steps"] == "30"
