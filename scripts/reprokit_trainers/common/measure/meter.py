"""The meter: global samples per optimizer step, and the clock read only at measurement boundaries.

What a trainer's figure is made of (rundir.py writes it): the steady-state rate after the warm-up
steps and the whole run's, each with the samples and seconds it was counted from; the breakdown of
each step's time, stalls, and on request an energy meter and a profiler over the same steps and
boundaries, so every figure covers the same window; and the run's peak memory.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from reprokit_trainers.common.measure import devicememory
from reprokit_trainers.common.measure.breakdown import Breakdown
from reprokit_trainers.common.measure.energy import EnergyMeter
from reprokit_trainers.common.measure.profiling import StepProfiler
from reprokit_trainers.common.measure.stalls import StallWatch
from reprokit_trainers.common.process import streams


def peak_memory() -> tuple[int | None, str]:
    """The run's peak memory and what it is the peak of: the device's allocator on a GPU or an HPU,
    the process's resident set on a CPU (the best a CPU run can say)."""
    hpu = getattr(torch, "hpu", None)
    if hpu is not None and hpu.is_available():
        return int(hpu.max_memory_allocated()), "hpu allocator"
    if torch.cuda.is_available():
        return int(torch.cuda.max_memory_allocated()), "cuda allocator"
    try:
        import resource

        # ru_maxrss is KiB on Linux.
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, "host resident set"
    except (ImportError, OSError):
        return None, "unknown"


@dataclass
class ThroughputMeter:
    """Counts global samples per step and reads the clock only at measurement boundaries.

    ``step_end`` is called once per optimizer step with the number of samples that step consumed on
    all ranks. The meter synchronizes the device, and reads the clock, only at a boundary: the end of
    the last warm-up step (where the steady-state clock starts), and the steps the caller marks
    (logging steps and the last step). Whether the host waits for the device in between is the
    loop's own choice: the published loops wait where their publications did (main.py and pycls
    every step, the Trainer's loss check every step; tests/test_conformance_loop.py), the loops beyond
    them only at these boundaries. The figures are exact at the last boundary: samples counted up to
    it, over the time up to it.

    The breakdown of each step's time is always kept (its readings wait for nothing until a boundary);
    an energy meter and a profiler are attached on request (``attach``) and follow the same steps and
    boundaries, so every figure covers the same window.
    """

    warmup_steps: int
    total_steps: int | None = None
    start: float = field(default_factory=lambda: time.perf_counter())
    steps: int = 0
    samples: int = 0
    measured_samples: int = 0
    measured_start: float | None = None
    first_step_samples: int | None = None  # the global batch, as the first step held it (mlperf.log)
    # The last boundary: its time, and the counts at that moment.
    last_time: float | None = None
    marked_steps: int = 0
    marked_samples: int = 0
    marked_measured_samples: int = 0
    _interval_samples: int = 0
    _interval_start: float | None = None
    breakdown: Breakdown = field(default_factory=Breakdown)
    # Steps of the measured window many times the median one (a stopped process, a stalled read).
    stalls: StallWatch = field(default_factory=StallWatch)
    energy: EnergyMeter | None = None
    profiler: StepProfiler | None = None

    def attach(self, energy: EnergyMeter | None = None, profiler: StepProfiler | None = None) -> None:
        """Start an energy meter and a profiler on this meter's steps (before the first step)."""
        if energy is not None:
            self.energy = energy.start(window_starts=self.warmup_steps <= 0)
        if profiler is not None:
            self.profiler = profiler
            profiler.start()

    def step_end(self, global_samples: int, boundary: bool = False) -> None:
        """One optimizer step ended; ``boundary``: a step whose time is read (logging, last)."""
        self.steps += 1
        self.samples += global_samples
        if self.steps == 1:
            self.first_step_samples = global_samples
        if self.steps > self.warmup_steps:
            self.measured_samples += global_samples
        self.stalls.step(self.steps, time.perf_counter(), measured=self.steps > self.warmup_steps)
        self.breakdown.step_end(measured=self.steps > self.warmup_steps)
        if self.profiler is not None:
            self.profiler.step()
        if self.steps == self.warmup_steps or boundary:
            self._mark()

    def _mark(self) -> None:
        streams.synchronize()
        now = time.perf_counter()
        self.breakdown.resolve()
        if self.energy is not None:
            self.energy.mark(now, window_start=self.steps == self.warmup_steps)
        devicememory.sample()  # NVML's view of the process's memory, after the clock: not timed
        if self.steps == self.warmup_steps:
            # The steady-state clock starts at the end of the last warm-up step.
            self.measured_start = now
            self.stalls.restart(now)
        self.last_time = now
        self.marked_steps = self.steps
        self.marked_samples = self.samples
        self.marked_measured_samples = self.measured_samples

    def interval(self) -> tuple[int, float]:
        """Samples and seconds since the previous call (for one throughput.csv row)."""
        now = self.last_time or time.perf_counter()
        start = self._interval_start or self.start
        samples = self.marked_samples - self._interval_samples
        self._interval_samples, self._interval_start = self.marked_samples, now
        return samples, max(now - start, 1e-9)

    @property
    def elapsed(self) -> float:
        return (self.last_time or time.perf_counter()) - self.start

    @property
    def samples_per_second(self) -> float | None:
        """Global samples/s after warm-up; None when the run never got past the warm-up."""
        figure = self.after_warmup()
        return figure["value"] if figure else None

    def after_warmup(self) -> dict[str, Any] | None:
        """The kit's steady-state figure (definition ``after_warmup``)."""
        start = self.start if self.warmup_steps <= 0 else self.measured_start
        if start is None or self.last_time is None or self.marked_measured_samples == 0:
            return None
        seconds = max(self.last_time - start, 1e-9)
        return figure(
            self.marked_measured_samples, seconds, f"steps {self.warmup_steps + 1}-{self.marked_steps}"
        )

    def whole_run(self) -> dict[str, Any] | None:
        """Every step's samples over the time since the meter started (definition ``whole_run``)."""
        if self.last_time is None or self.marked_samples == 0:
            return None
        return figure(
            self.marked_samples, max(self.last_time - self.start, 1e-9), f"steps 1-{self.marked_steps}"
        )

    def finish(self) -> None:
        """Stop the energy meter's thread and the profiler (idempotent): the window is over."""
        if self.energy is not None:
            self.energy.stop()
        if self.profiler is not None:
            self.profiler.stop()

    def explained(self, run_dir: Path) -> dict[str, Any]:
        """What summary.json says of where the measured window's time and energy went, and its trace."""
        steady = self.after_warmup()
        seconds = steady["seconds"] if steady else None
        first = self.warmup_steps + 1
        fields: dict[str, Any] = {
            "breakdown": self.breakdown.summary(seconds, f"steps {first}-{self.marked_steps}, rank 0"),
            "step_time_s": self.breakdown.step_time_summary(),
        }
        if self.energy is not None:
            fields.update(self.energy.summary(self.marked_measured_samples))
        if self.profiler is not None:
            fields["profile"] = self.profiler.summary(run_dir)
        return fields


def figure(samples: float, seconds: float, counted: str) -> dict[str, Any]:
    """One definition's figure as summary.json holds it: the rate and what it was made of."""
    return {"value": samples / seconds, "samples": samples, "seconds": round(seconds, 6), "counted": counted}
