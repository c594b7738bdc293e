"""A trainer stopped mid-window (SIGSTOP then SIGCONT: a preempted VM, a stalled filesystem) is not a
slow trainer: the meter notices a step many times the median one and records the stall with its
length, as a departure of kind throughput that stops the verdict."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from reprokit_trainers.common.measure import meter as metering
from reprokit_trainers.common.measure.meter import ThroughputMeter
from reprokit_trainers.common.record.rundir import RunDir


@pytest.fixture
def clock(monkeypatch):
    state = {"now": 100.0}
    monkeypatch.setattr(metering.time, "perf_counter", lambda: state["now"])
    monkeypatch.setattr(metering.streams, "synchronize", lambda *a, **k: None)
    return state


def _run(clock, tmp_path, steps: dict[int, float], total: int = 40, step_s: float = 0.5) -> dict:
    """A run of `total` steps of `step_s` each, the steps in `steps` taking the seconds given."""
    run_dir = RunDir(tmp_path)
    meter = ThroughputMeter(warmup_steps=2, total_steps=total)
    for step in range(1, total + 1):
        clock["now"] += steps.get(step, step_s)
        meter.step_end(8, boundary=step % 10 == 0 or step == total)
        if step % 10 == 0:
            run_dir.log_step(meter)
    return run_dir.write_summary(meter)


def test_a_step_stopped_for_a_minute_is_a_stall_that_stops_the_verdict(clock, tmp_path):
    summary = _run(clock, tmp_path, {23: 60.5})
    assert summary["stalls"]["median_step_s"] == 0.5
    assert summary["stalls"]["found"] == [{"step": 23, "seconds": 60.5}]
    (stalled,) = [d for d in summary["departures"] if "stalled" in d["reason"]]
    assert stalled == {
        "kind": "throughput",
        "reason": "the run stalled for 60.5 s at step 23, against a median step of 0.5 s: 76% of the measured "
        "window (a stopped process, a preempted machine or a stalled read)",
    }


def test_the_steps_a_run_is_made_of_are_not_stalls(clock, tmp_path):
    # Each logging step waits for the device's queued steps (3x), a collection pauses one step 2 s:
    # neither is many times the median step and long in itself.
    steps = {step: 1.5 for step in range(10, 41, 10)} | {17: 2.0}
    summary = _run(clock, tmp_path, steps)
    assert summary["stalls"]["found"] == [] and summary["departures"] == []


def test_a_stall_that_costs_under_one_percent_of_the_window_is_recorded_without_a_departure(clock, tmp_path):
    summary = _run(clock, tmp_path, {500: 6.0}, total=4000)
    assert summary["stalls"]["found"] == [{"step": 500, "seconds": 6.0}]
    assert summary["departures"] == []


SCRIPT = """
import sys, time
from reprokit_trainers.common.record.rundir import RunDir
from reprokit_trainers.common.measure.meter import ThroughputMeter
run_dir, meter = RunDir(sys.argv[1]), ThroughputMeter(warmup_steps=2, total_steps=120)
for step in range(1, 121):
    time.sleep(0.03)
    meter.step_end(4, boundary=step % 20 == 0 or step == 120)
    if step == 10:
        print("measuring", flush=True)
run_dir.write_summary(meter)
"""


@pytest.mark.slow
def test_a_trainer_stopped_with_sigstop_records_the_stall(tmp_path):
    env = {**os.environ, "REPROKIT_WATCH_LOAD": "0"}
    trainer = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                               env=env)  # fmt: skip
    assert trainer.stdout.readline().strip() == "measuring"
    os.kill(trainer.pid, signal.SIGSTOP)
    time.sleep(6)
    os.kill(trainer.pid, signal.SIGCONT)
    assert trainer.wait(timeout=120) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    ((found,),) = [summary["stalls"]["found"]]
    assert found["seconds"] >= 6.0
    (stalled,) = [d for d in summary["departures"] if d["reason"].startswith("the run stalled for ")]
    assert stalled["kind"] == "throughput" and f"at step {found['step']}" in stalled["reason"]
