"""One machine, one measurement, seen from the trainer: a run records what else used its machine
while it measured (CPU outside its process session, the load average, other processes on its GPUs),
and a shared machine is a departure of kind throughput. The kernel's /proc and NVML are faked."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from reprokit_trainers.common.measure.machineload import LoadWatch
from reprokit_trainers.common.record.contract import THROUGHPUT

SESSION = 500  # the run's process session
HZ = 100


class FakeMachine:
    """A /proc folder whose counters the test moves: the machine's busy ticks and each process's."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.busy = 10_000
        self.now = 0.0
        self.load = 0.3
        self.processes: dict[int, tuple[int, int]] = {}  # pid -> (session, ticks)
        root.mkdir()
        self.write()

    def process(self, pid: int, session: int, ticks: int = 0) -> None:
        self.processes[pid] = (session, ticks)
        self.write()

    def advance(self, seconds: float, ours_cores: float, others_cores: float) -> None:
        self.now += seconds
        ours = int(ours_cores * seconds * HZ)
        self.busy += ours + int(others_cores * seconds * HZ)
        pid = next(p for p, (s, _) in self.processes.items() if s == SESSION)
        session, ticks = self.processes[pid]
        self.processes[pid] = (session, ticks + ours)
        self.write()

    def write(self) -> None:
        # user nice system idle iowait irq softirq steal: all the busy ticks as user time.
        (self.root / "stat").write_text(f"cpu  {self.busy} 0 0 99999 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\n")
        (self.root / "loadavg").write_text(f"{self.load:.2f} 0.50 0.40 2/300 4321\n")
        for pid, (session, ticks) in self.processes.items():
            folder = self.root / str(pid)
            folder.mkdir(exist_ok=True)
            # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
            # cutime cstime priority nice threads itrealvalue starttime
            (folder / "stat").write_text(
                f"{pid} (python3 x) R 1 {session} {session} 0 -1 0 0 0 0 0 {ticks} 0 0 0 20 0 1 0 777\n"
            )


def _watch(machine: FakeMachine, nvml=None) -> LoadWatch:
    watch = LoadWatch(proc=machine.root, nvml=nvml, session=SESSION, cpus=2, clock=lambda: machine.now)
    watch.hz = HZ
    return watch


@pytest.fixture
def machine(tmp_path):
    found = FakeMachine(tmp_path / "proc")
    found.process(1234, SESSION)  # the trainer
    found.process(77, 1)  # a daemon, idle
    return found


def test_a_run_alone_on_its_machine_records_its_load_and_no_departure(machine):
    watch = _watch(machine)
    watch.sample()
    for _ in range(5):
        machine.advance(2.0, ours_cores=1.8, others_cores=0.05)  # the trainer busy, the machine quiet
        watch.sample()
    found = watch.summary()
    assert found["samples"] == 5 and found["others_cpu_cores_mean"] == pytest.approx(0.05, abs=0.01)
    assert found["load_average_max"] == 0.3 and found["gpu_others"] == []
    assert watch.departure() is None


def test_a_run_beside_another_busy_process_records_a_shared_machine(machine):
    watch = _watch(machine)
    watch.sample()
    machine.load = 3.9
    for _ in range(5):
        machine.advance(2.0, ours_cores=0.4, others_cores=1.5)  # another session's trainer beside it
        watch.sample()
    assert watch.summary()["others_cpu_cores_mean"] == pytest.approx(1.5, abs=0.01)
    assert watch.departure() == (
        "the machine was shared while the run measured: processes outside the run used 1.5 of 2 CPU cores on "
        "average (load average up to 3.9)"
    )


class FakeNvml:
    """NVML's process lists, per device."""

    def __init__(self, devices: list[list[tuple[int, int]]]) -> None:
        self.devices = devices

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int):
        return [SimpleNamespace(pid=pid, usedGpuMemory=memory) for pid, memory in self.devices[handle]]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int):
        return []


def test_another_process_on_a_gpu_of_the_run_is_a_shared_machine(machine):
    machine.process(4242, 900)  # another user's job, visible here
    nvml = FakeNvml([[(1234, 30 * 2**30), (4242, 20 * 2**30)], [(1234, 30 * 2**30)]])
    watch = _watch(machine, nvml)
    watch.sample()
    machine.advance(2.0, ours_cores=1.0, others_cores=0.0)
    watch.sample()
    assert watch.summary()["gpu_others"] == [
        {"device": 0, "pid": 4242, "what": "another process", "memory_bytes": 20 * 2**30}
    ]
    assert watch.departure() == (
        "the machine was shared while the run measured: GPU 0 also ran another process (pid 4242, 20.0 GiB)"
    )


def test_seen_from_a_container_a_second_process_on_a_gpu_is_someone_elses(machine):
    # NVML gives the host's pids, which this PID namespace cannot see: one per GPU is the run's rank.
    nvml = FakeNvml([[(91234, None)], [(91235, None), (95000, None)]])
    watch = _watch(machine, nvml)
    watch.sample()
    assert [(g["device"], g["pid"]) for g in watch.summary()["gpu_others"]] == [(1, 95000)]
    assert "GPU 1 also ran a process outside this container (pid 95000)" in watch.departure()


def test_a_trainer_on_a_shared_machine_records_the_departure_and_its_load(tmp_path, machine, monkeypatch):
    pytest.importorskip("torch")
    from reprokit_trainers.common.measure.meter import ThroughputMeter
    from reprokit_trainers.common.record import rundir
    from reprokit_trainers.common.record.rundir import RunDir

    monkeypatch.setenv("REPROKIT_WATCH_LOAD", "1")
    watches: list[LoadWatch] = []

    def watch_the_fake_machine() -> LoadWatch:
        watches.append(_watch(machine))
        watches[-1].interval = 3600.0  # the test takes the samples
        return watches[-1]

    monkeypatch.setattr(rundir, "LoadWatch", watch_the_fake_machine)
    run = RunDir(tmp_path / "run")
    meter = ThroughputMeter(warmup_steps=1, total_steps=4)
    for _ in range(4):
        meter.step_end(8, boundary=True)
        run.log_step(meter, loss=1.0)
        machine.advance(2.0, ours_cores=0.5, others_cores=1.2)
        watches[0].sample()
    summary = run.write_summary(meter)
    shared = [d for d in summary["departures"] if d["kind"] == THROUGHPUT]
    assert shared == [
        {
            "reason": "the machine was shared while the run measured: processes outside the run used 1.2 of 2 "
            "CPU cores on average (load average up to 0.3)",
            "kind": THROUGHPUT,
        }
    ]
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert written["machine_load"]["others_cpu_cores_mean"] == pytest.approx(1.2, abs=0.01)
    assert written["departures"] == summary["departures"]
