"""Where a training step's time goes: waiting for the next batch, the step itself, gradient
communication, and the rest. The meter's breakdown, always on.

The clock is read where the loop already passes: when it asks for a batch and gets it, and when a
step ends. On a GPU each step also records two CUDA events (its start, when its batch arrived, and
its end) without waiting for them; they are read at the meter's boundaries, where the device is
synchronized anyway. So:

- ``data_wait``: time the loop blocked on the next batch (loader workers, or the main process with
  none; collation; a copy the loader makes to the device). On a GPU only the part the device spent
  idle counts: a wait the device spends busy on queued steps costs nothing.
- ``compute``: the step's time (device time between its events on a GPU; host time on a CPU, and on
  an HPU whose lazy mode queues work, where the split is the host's view), less ``communication``.
- ``communication``: the part of DDP's gradient all-reduce in a step that the backward pass did not
  hide: from the end of the backward's compute to the end of the last bucket's all-reduce (the
  reducer's all-reduce time less its compute/communication overlap, as DDP's reducer times both
  itself: its runtime logging, the host clock on a CPU, CUDA events on a GPU). The whole all-reduce,
  launch of the first bucket to the end of the last, spans most of an overlapped backward: counted
  whole, an H100 training VOLO-D5 with overlap showed 55% "communication" on one process. No Python
  runs per bucket (a communication hook did, and cost 0.1-0.2 ms a bucket:
  benchmarks/meter.py). The reducer's figure for a step is read when the next forward starts, so
  each step counts the all-reduce of the step before it. The reducer times every iteration where
  that costs nothing: on a CPU, and on a GPU whose loop synchronizes every step anyway (its events
  have completed when they are read); elsewhere one iteration in DDP's default 100, each sample
  standing for the steps until the next. Not timed (None) where the model is not DDP-wrapped (one
  process, FSDP, Gaudi).
- ``other``: the rest of the window (logging, the meter's synchronization, the loop's own work).

Each is a fraction of the window it was measured over: a throughput.csv row's interval, or the
meter's measured window (after the warm-up) for summary.json. Figures are rank 0's.

The same readings give each measured step's own time, from the end of the step before to its end
(between the two end events on a GPU, the host clock elsewhere), and summary.json's ``step_time_s``
their percentiles (p50, p90, p99): nothing is synchronized for them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from reprokit_trainers.common.process.distributed import world_size

SHARES = ("data_wait", "compute", "communication", "other")
HOST, DEVICE = "host clock", "device events"


@dataclass
class Totals:
    """Seconds of each share summed over resolved steps."""

    steps: int = 0
    data_wait: float = 0.0
    compute: float = 0.0
    communication: float = 0.0

    def add(self, data_wait: float, compute: float, communication: float) -> None:
        self.steps += 1
        self.data_wait += data_wait
        self.compute += compute
        self.communication += communication


@dataclass
class _Step:
    """One step's raw timings, kept until a boundary resolves them."""

    wait: float = 0.0  # host seconds blocked on batches since the previous step ended
    wait_inside: float = 0.0  # of which after the step had started (gradient accumulation)
    host_start: float | None = None
    host_end: float = 0.0
    start: Any = None  # device event at the first batch's arrival
    end: Any = None  # device event at the step's end
    communication: float = 0.0  # seconds, DDP's reducer's latest figure (the step before)
    measured: bool = False
    previous_end_host: float | None = None  # when the step before ended (host clock)


def device_events() -> Callable[[], Any] | None:
    """A factory of timing events on this machine's GPU, or None where the host clock is the basis."""
    if torch.cuda.is_available():
        return lambda: torch.cuda.Event(enable_timing=True)
    return None


class Breakdown:
    """Data wait, compute, communication and other, per interval and over the measured window."""

    def __init__(self, events: Callable[[], Any] | None | str = "auto") -> None:
        self._event = device_events() if events == "auto" else events
        self.basis = DEVICE if self._event is not None else HOST
        self.data_timed = False
        # How gradient communication is timed, or why it is not.
        self.communication = "not timed (the model is not wrapped in DistributedDataParallel)"
        self.communication_timed = False
        self._pending: list[_Step] = []
        self._current: _Step | None = None
        self._waited = 0.0
        self._ddp: Any = None  # the DDP model whose reducer times its all-reduce
        self._ddp_iteration: int | None = None
        self._ddp_seconds = 0.0  # its latest figure: one iteration's all-reduce
        self._last_end_host: float | None = None
        self._anchor: Any = None  # device event at the last boundary: where the next gap starts
        self.interval = Totals()
        self.measured = Totals()
        self.step_times: list[float] = []  # seconds of each measured step, end to end
        self._previous_end: Any = None  # the device event at the end of the last resolved step

    # --- what the loop calls ---------------------------------------------------------------------

    def batches(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """``iterable``'s batches, each fetch timed; starting the iterator (a loader's workers) too."""
        began = self._fetch_begins()
        iterator = iter(iterable)
        while True:
            try:
                batch = next(iterator)
            except StopIteration:
                self._fetch_ends(began, arrived=False)
                return
            self._fetch_ends(began, arrived=True)
            yield batch
            began = self._fetch_begins()

    @contextmanager
    def waiting_for_data(self) -> Iterator[None]:
        """Time a block that fetches a step's batches (a Trainer's own fetch)."""
        began = self._fetch_begins()
        try:
            yield
        finally:
            self._fetch_ends(began, arrived=True)

    def _fetch_begins(self) -> float:
        self.data_timed = True
        if self._event is not None and self._anchor is None:
            self._anchor = self._record()
        return time.perf_counter()

    def _fetch_ends(self, began: float, arrived: bool) -> None:
        now = time.perf_counter()
        waited = now - began
        self._waited += waited
        if not arrived:
            return
        if self._current is None:
            self._current = _Step(host_start=now, start=self._record())
        else:
            self._current.wait_inside += waited

    def step_end(self, measured: bool) -> None:
        """One optimizer step ended (the meter calls this); ``measured``: it is after the warm-up."""
        step = self._current or _Step(host_start=self._last_end_host)
        self._current = None
        step.wait, self._waited = self._waited, 0.0
        step.host_end = time.perf_counter()
        step.end = self._record()
        if self._ddp is not None:
            self._read_ddp()
            step.communication = self._ddp_seconds
        step.measured = measured
        step.previous_end_host = self._last_end_host
        self._last_end_host = step.host_end
        self._pending.append(step)

    def resolve(self) -> None:
        """Turn the pending steps into seconds. Call at a boundary, after the device is synchronized:
        every event recorded so far has completed, so reading them waits for nothing."""
        previous = self._anchor
        for step in self._pending:
            data_wait, compute, communication = (
                self._device_step(step, previous) if self._event is not None else self._host_step(step)
            )
            previous = step.end
            self.interval.add(data_wait, compute, communication)
            took = self._step_time(step)
            if step.measured:
                self.measured.add(data_wait, compute, communication)
                if took is not None:
                    self.step_times.append(took)
        self._pending = []
        if self._event is not None:
            self._anchor = self._record()

    def _step_time(self, step: _Step) -> float | None:
        """The step's time from the end of the one before (None for the run's first step)."""
        if self._event is None:
            return None if step.previous_end_host is None else step.host_end - step.previous_end_host
        before, self._previous_end = self._previous_end, step.end
        return None if before is None else before.elapsed_time(step.end) / 1e3

    def step_time_summary(self) -> dict[str, Any] | None:
        """summary.json's ``step_time_s``: the measured steps' percentiles (linear between ranks)."""
        times = sorted(self.step_times)
        if not times:
            return None
        return {
            **{f"p{q}": round(percentile(times, q), 6) for q in (50, 90, 99)},
            "mean": round(sum(times) / len(times), 6),
            "steps": len(times),
            "basis": self.basis,
        }

    def _host_step(self, step: _Step) -> tuple[float, float, float]:
        start = step.host_start if step.host_start is not None else step.host_end
        span = max(step.host_end - start - step.wait_inside, 0.0)
        communication = min(step.communication, span)
        return step.wait, span - communication, communication

    def _device_step(self, step: _Step, previous: Any) -> tuple[float, float, float]:
        start = step.start if step.start is not None else previous
        if start is None:  # nothing recorded before this step's end: only its end is known
            return 0.0, 0.0, 0.0
        span = start.elapsed_time(step.end) / 1e3
        # The device sat idle between the previous step's end and this one's start: the part of the
        # host's wait for data that the device felt.
        gap = previous.elapsed_time(start) / 1e3 if previous is not None and step.start is not None else 0.0
        communication = min(step.communication, span)
        return min(step.wait, max(gap, 0.0)), span - communication, communication

    def _record(self) -> Any:
        if self._event is None:
            return None
        event = self._event()
        event.record()
        return event

    # --- gradient communication ---------------------------------------------------------------------

    def watch(self, model: Any, every_step: bool = False) -> None:
        """Time the gradient all-reduce of a DistributedDataParallel ``model`` (compiled or not) with
        DDP's own reducer timers; anything else is noted as not timed. ``every_step``: the loop waits
        for the device every step (a published loop), so the reducer may time every iteration on a
        GPU too at no cost."""
        from torch.nn.parallel import DistributedDataParallel

        ddp = getattr(model, "_orig_mod", model)  # torch.compile's wrapper
        if not isinstance(ddp, DistributedDataParallel) and world_size() <= 1:
            self.communication = "none (one process)"
            return
        if not isinstance(ddp, DistributedDataParallel):
            kind = type(ddp).__name__
            self.communication = f"not timed ({kind} exposes no DDP reducer timers)"
            return
        if ddp.device_type == "hpu":
            self.communication = "not timed (Gaudi's collectives are left as they run)"
            return
        set_rate = getattr(ddp, "_set_ddp_runtime_logging_sample_rate", None)
        if set_rate is None or not hasattr(ddp, "_get_ddp_logging_data"):
            self.communication = "not timed (this torch's DDP keeps no runtime timers)"
            return
        every = every_step or ddp.device_type == "cpu"
        if every:
            set_rate(1)
        self._ddp = ddp
        sampled = "every iteration" if every else "iterations 1-10, then one in 100 (DDP's default)"
        self.communication = f"DDP's reducer timers, the all-reduce not hidden by the backward (its end after the backward's), {sampled} ({self.basis})"
        self.communication_timed = True

    def _read_ddp(self) -> None:
        """The reducer's latest figure, when it timed a new iteration (read at each step's end)."""
        data = self._ddp._get_ddp_logging_data()
        iteration, nanoseconds = data.get("iteration"), data.get("backward_comm_time")
        if iteration is None or nanoseconds is None or iteration == self._ddp_iteration:
            return
        hidden = data.get("backward_compute_comm_overlap_time") or 0
        self._ddp_iteration, self._ddp_seconds = iteration, max(nanoseconds - max(hidden, 0), 0) / 1e9

    # --- reading -----------------------------------------------------------------------------------

    def take_interval(self, seconds: float) -> dict[str, float | None]:
        """The interval since the previous call as fractions of its ``seconds`` (a throughput.csv row)."""
        totals, self.interval = self.interval, Totals()
        return {name: _round(value) for name, value in self.fractions(totals, seconds).items()}

    def fractions(self, totals: Totals, seconds: float) -> dict[str, float | None]:
        if seconds <= 0:
            return dict.fromkeys(SHARES)
        data = totals.data_wait if self.data_timed else None
        communication = totals.communication if self.communication_timed else None
        known = (data or 0.0) + totals.compute + (communication or 0.0)
        return {
            "data_wait": None if data is None else data / seconds,
            "compute": totals.compute / seconds,
            "communication": None if communication is None else communication / seconds,
            "other": max(seconds - known, 0.0) / seconds,
        }

    def summary(self, seconds: float | None, counted: str) -> dict[str, Any] | None:
        """summary.json's ``breakdown``: the measured window's fractions, their seconds, and how."""
        if seconds is None or self.measured.steps == 0:
            return None
        shares = self.fractions(self.measured, seconds)
        return {
            **{name: _round(value) for name, value in shares.items()},
            "seconds": {
                name: None if value is None else round(value * seconds, 6) for name, value in shares.items()
            },
            "window_s": round(seconds, 6),
            "steps": self.measured.steps,
            "counted": counted,
            "basis": self.basis,
            "data_wait_timed": self.data_timed,
            "communication_timed": self.communication,
        }


def percentile(ordered: list[float], q: float) -> float:
    """The q-th percentile of sorted values, linear between the closest ranks (numpy's default)."""
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
