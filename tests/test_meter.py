"""The trainers' meter and run-directory writer: what summary.json and throughput.csv say, and that
measuring does not disturb what is measured (the device is synchronized only at boundaries)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

from reprokit_trainers.common.measure import meter as metering
from reprokit_trainers.common.measure.meter import ThroughputMeter
from reprokit_trainers.common.process import precision, streams
from reprokit_trainers.common.record import rundir
from reprokit_trainers.common.record.rundir import RunDir


@pytest.fixture
def clock(monkeypatch):
    """A controllable perf_counter and a count of device synchronizations."""
    state = {"now": 100.0, "syncs": 0}
    monkeypatch.setattr(metering.time, "perf_counter", lambda: state["now"])

    def sync():
        state["syncs"] += 1

    monkeypatch.setattr(streams, "synchronize", lambda device=None: sync())
    return state


def test_the_device_is_synchronized_only_at_warmup_end_logging_steps_and_the_last_step(clock):
    meter = ThroughputMeter(warmup_steps=3, total_steps=20)
    for step in range(1, 21):
        clock["now"] += 0.5
        meter.step_end(8, boundary=step % 10 == 0 or step == 20)
    # step 3 (end of warm-up), steps 10 and 20: three syncs for twenty steps
    assert clock["syncs"] == 3


def test_after_warmup_counts_exactly_the_steps_after_warmup_up_to_the_last_boundary(clock):
    meter = ThroughputMeter(warmup_steps=3)
    for step in range(1, 11):
        clock["now"] += 0.5 if step > 3 else 2.0  # slow warm-up steps must not count
        meter.step_end(8, boundary=step == 10)
    figure = meter.after_warmup()
    assert figure["samples"] == 7 * 8
    assert figure["seconds"] == pytest.approx(7 * 0.5)
    assert figure["value"] == pytest.approx(16.0)
    whole = meter.whole_run()
    assert whole["samples"] == 80 and whole["seconds"] == pytest.approx(3 * 2.0 + 7 * 0.5)


def test_steps_after_the_last_boundary_are_not_counted_without_their_time(clock):
    meter = ThroughputMeter(warmup_steps=1)
    for step in range(1, 6):
        clock["now"] += 1.0
        meter.step_end(4, boundary=step == 3)
    # steps 4 and 5 ran but no clock was read after them: the figure stops at step 3
    assert meter.after_warmup()["samples"] == 8
    assert meter.after_warmup()["seconds"] == pytest.approx(2.0)


def test_a_run_that_never_passes_warmup_has_no_steady_state_figure(clock):
    meter = ThroughputMeter(warmup_steps=5)
    for _ in range(3):
        clock["now"] += 1.0
        meter.step_end(4, boundary=True)
    assert meter.after_warmup() is None and meter.samples_per_second is None
    assert meter.whole_run()["samples"] == 12


def test_summary_holds_each_definition_departures_and_switches_and_the_csv_its_total(clock, tmp_path):
    run_dir = RunDir(tmp_path)
    meter = ThroughputMeter(warmup_steps=2, total_steps=6)
    for step in range(1, 7):
        clock["now"] += 1.0
        meter.step_end(10, boundary=step % 3 == 0 or step == 6)
        if step % 3 == 0:
            run_dir.log_step(meter, loss=1.0)
    run_dir.depart("synthetic data", rundir.THROUGHPUT)
    run_dir.depart("synthetic data", rundir.THROUGHPUT)
    run_dir.depart("random weights", rundir.QUALITY)
    summary = run_dir.write_summary(
        meter, throughput={"gaudi_trainer": metering.figure(35, 3.5, "formula")}, loader="torch"
    )
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written == json.loads(json.dumps(summary, default=str))
    assert written["schema_version"] == rundir.SCHEMA_VERSION
    assert set(written["throughput"]) == {"after_warmup", "whole_run", "gaudi_trainer"}
    assert written["throughput"]["after_warmup"]["samples"] == 40
    assert written["throughput"]["gaudi_trainer"]["value"] == pytest.approx(10.0)
    assert written["departures"] == [
        {"reason": "synthetic data", "kind": "throughput"},
        {"reason": "random weights", "kind": "quality"},
    ]
    assert written["loader"] == "torch"
    assert written["peak_memory_of"] == "host resident set"
    rows = list(csv.DictReader((tmp_path / "throughput.csv").open()))
    assert [(r["step"], r["steps_total"], r["samples"]) for r in rows] == [("3", "6", "30"), ("6", "6", "30")]


def test_tf32_is_turned_off_over_ngc_override_and_the_state_recorded():
    code = (
        "from reprokit_trainers.common.process import precision; import json; "
        "print(json.dumps(precision.set_tf32(False)))"
    )
    env = {**os.environ, "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    state = json.loads(out.stdout.strip().splitlines()[-1])
    assert state == {
        "tf32_matmul": False,
        "tf32_cudnn": False,
        "float32_matmul_precision": "highest",
        "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "0",
    }


def test_tf32_that_cannot_be_set_is_an_error_not_a_silent_tf32_run(monkeypatch):
    monkeypatch.setattr(precision, "tf32_state", lambda: {"tf32_matmul": True})
    monkeypatch.setattr(precision.torch.backends.cuda.matmul, "allow_tf32", True, raising=False)
    with pytest.raises(RuntimeError, match="could not be turned off"):
        precision.set_tf32(False)
