"""Energy and utilization over the meter's measured window, from what the hardware itself reports.

Each accelerator's folder says how its hardware is read (``energy_source`` in
accelerators/<name>/trainer.py, found by reprokit_trainers/common/vendor.py): NVIDIA's NVML and AMD's
AMD SMI read a total-energy counter in process (``CounterSource``, the one shape of a vendor library
that counts energy per device), Gaudi's HLML likewise, else hl-smi's power sampled; a CPU its RAPL
package counters. This module is the sampler every source feeds: the readings at the meter's
boundaries, power and utilization sampled by a thread, the power integrated where a device has no
counter (and said so).

Where none answers, ``energy`` says ``unavailable (why)`` and the numbers are None: never a guess.
Only rank 0 samples, its node's devices: the samples per joule are the samples those devices' ranks
trained (every rank trains as many per step). This module must not import the kit.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from reprokit_trainers.common import vendor

SAMPLE_INTERVAL_S = 0.2  # 5 Hz: NVML and sysfs reads cost microseconds


class Unavailable(Exception):
    """No energy source on this machine; the message says why, in a few words."""


def vendor_library(module: str, package: str) -> Any:
    """The vendor's management library `module`; Unavailable names the `package` that would install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise Unavailable(f"{package} is not installed") from None


@contextlib.contextmanager
def unavailable_on(
    errors: type[BaseException] | tuple[type[BaseException], ...],
    library: str,
    shutdown: Callable[[], Any] | None = None,
) -> Iterator[None]:
    """The vendor library's `errors` inside the block as Unavailable(``library: error``), and an
    Unavailable raised there as it is; `shutdown` (the library opened before the block) first, so that
    a source which cannot open leaves nothing open."""
    try:
        yield
    except Unavailable:
        if shutdown is not None:
            shutdown()
        raise
    except errors as error:
        if shutdown is not None:
            shutdown()
        raise Unavailable(f"{library}: {error}") from None


# --- sources ------------------------------------------------------------------------------------


class Source:
    """What one kind of hardware reports. ``counter``: cumulative joules since the source opened (wraps
    already undone), or None where the hardware has no counter; ``sample``: (watts, utilization 0-1)."""

    name = ""
    interval_s = SAMPLE_INTERVAL_S
    has_counter = False
    of = ""  # the devices measured, in words
    ranks: int | None = None  # the ranks those devices ran; None when that is not known

    def counter(self) -> float | None:
        return None

    def sample(self) -> tuple[float | None, float | None]:
        raise NotImplementedError

    def close(self) -> None:
        return None


class CounterSource(Source):
    """Devices read in process through a vendor's management library: its total-energy counter
    (millijoules), power draw (milliwatts) and utilization (percent), per device handle. The vendor's
    trainer.py gives the reads and the library's error type; a device without the counter has its
    sampled power integrated instead."""

    def __init__(
        self,
        name: str,
        handles: list[Any],
        *,
        of: str,
        ranks: int | None,
        utilization_of: str,
        energy_mj: Callable[[Any], float],
        power_mw: Callable[[Any], float],
        busy_percent: Callable[[Any], float],
        error: type[BaseException] | tuple[type[BaseException], ...],
        shutdown: Callable[[], Any] = lambda: None,
    ) -> None:
        self.name, self.handles, self.of, self.ranks = name, handles, of, ranks
        self.utilization_of = utilization_of
        self._energy, self._power, self._busy = energy_mj, power_mw, busy_percent
        self._error, self._shutdown = error, shutdown
        try:
            self._base = self._energy_mj()
            self.has_counter = True
        except self._error:
            self._base = 0  # no counter (an NVIDIA GPU before Volta): integrate the sampled power
        self.method = "total energy counter" if self.has_counter else "sampled power, integrated"

    def _energy_mj(self) -> float:
        return sum(self._energy(h) for h in self.handles)

    def counter(self) -> float | None:
        return (self._energy_mj() - self._base) / 1e3 if self.has_counter else None

    def sample(self) -> tuple[float | None, float | None]:
        try:
            watts: float | None = sum(self._power(h) for h in self.handles) / 1e3
        except self._error:
            watts = None
        try:
            busy = [self._busy(h) for h in self.handles]
            utilization: float | None = sum(busy) / len(busy) / 100
        except self._error:
            utilization = None
        return watts, utilization

    def close(self) -> None:
        with contextlib.suppress(self._error):
            self._shutdown()


def this_machine(device_type: str, local_ranks: int) -> Source:
    """The source of this run's accelerator (its folder's ``energy_source``); Unavailable says why
    there is none."""
    try:
        accelerator = vendor.this_accelerator(device_type)
    except ImportError as error:
        raise Unavailable(f"the accelerator's trainer code: {error}") from None
    return accelerator.energy_source(local_ranks)


# --- the sampler --------------------------------------------------------------------------------


@dataclass
class _Tally:
    """Integrals from the window's start up to a moment: what a boundary snapshots."""

    t: float
    counter: float | None = None
    power_integral: float = 0.0  # joules, from the sampled power
    power_seconds: float = 0.0
    utilization_integral: float = 0.0
    utilization_seconds: float = 0.0
    peak_w: float | None = None
    samples: int = 0


@dataclass
class EnergyMeter:
    """Samples a source on a thread; the meter marks its boundaries, where the window is cut."""

    source: Source | None
    unavailable: str | None = None
    world_size: int = 1
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _last: tuple[float, float | None, float | None, float | None] | None = None  # t, watts, busy, counter
    _tally: _Tally | None = None  # since the window started (None before)
    _start: _Tally | None = None
    _end: _Tally | None = None

    @classmethod
    def for_this_machine(cls, device_type: str, local_ranks: int, world_size: int) -> EnergyMeter:
        try:
            return cls(this_machine(device_type, local_ranks), world_size=world_size)
        except Unavailable as why:
            return cls(None, unavailable=str(why), world_size=world_size)

    def start(self, window_starts: bool = False) -> EnergyMeter:
        if self.source is not None and self._thread is None:
            self._take()
            if window_starts:
                self.mark(time.perf_counter(), window_start=True)
            self._thread = threading.Thread(target=self._run, name="reprokit-energy", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        assert self.source is not None
        while not self._stop.wait(self.source.interval_s):
            try:
                self._take()
            except Exception:  # noqa: BLE001 -- a failed reading must never stop a training run
                continue

    def _take(self) -> None:
        assert self.source is not None
        watts, busy = self.source.sample()
        counter = self.source.counter() if self.source.has_counter else None
        now = time.perf_counter()
        with self._lock:
            last, self._last = self._last, (now, watts, busy, counter)
            if last is None or self._tally is None:
                return
            seconds = now - last[0]
            if watts is None and counter is not None and last[3] is not None and seconds > 0:
                watts = (counter - last[3]) / seconds  # RAPL: the mean power since the last reading
            tally = self._tally
            tally.samples += 1
            if watts is not None:
                before = last[1] if last[1] is not None else watts
                tally.power_integral += (before + watts) / 2 * seconds
                tally.power_seconds += seconds
                tally.peak_w = watts if tally.peak_w is None else max(tally.peak_w, watts)
            if busy is not None:
                tally.utilization_integral += busy * seconds
                tally.utilization_seconds += seconds

    def mark(self, now: float, window_start: bool = False) -> None:
        """A meter boundary at ``now``: the window starts here (the end of the warm-up), or may end."""
        if self.source is None:
            return
        counter = self.source.counter() if self.source.has_counter else None
        with self._lock:
            if window_start:
                self._tally = _Tally(now)
                if self._last is not None:
                    self._last = (now, self._last[1], self._last[2], counter)
                self._start = _Tally(now, counter=counter)
                return
            if self._tally is not None:
                self._end = _Tally(**{**self._tally.__dict__, "t": now, "counter": counter})

    def reading(self) -> tuple[float | None, float | None]:
        """(the newest sampled power in watts, the joules since the window started) for a logging
        interval's scalars; None where there is no reading yet (or before the window)."""
        with self._lock:
            last, start, tally = self._last, self._start, self._tally
            source = self.source
            if source is None or last is None:
                return None, None
            watts = last[1]
            if tally is None or start is None:
                return watts, None
            if source.has_counter and last[3] is not None and start.counter is not None:
                return watts, max(last[3] - start.counter, 0.0)
            return watts, tally.power_integral

    def stop(self) -> None:
        """Stop sampling and release the source (once: the window is over)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self.source is not None:
            self.source.close()

    def summary(self, measured_samples: float) -> dict[str, Any]:
        """summary.json's energy fields over the window from the first to the last mark."""
        empty = {
            "energy_joules": None,
            "samples_per_joule": None,
            "power_mean_w": None,
            "power_peak_w": None,
            "utilization_mean": None,
        }
        if self.source is None:
            return {**empty, "energy": f"unavailable ({self.unavailable})"}
        if self._start is None or self._end is None:
            return {**empty, "energy": "unavailable (the run ended before a measured window)"}
        start, end, source = self._start, self._end, self.source
        seconds = end.t - start.t
        if source.has_counter and start.counter is not None and end.counter is not None:
            joules = end.counter - start.counter
        elif end.power_seconds >= 0.5 * seconds and end.samples >= 2:
            joules = end.power_integral * seconds / end.power_seconds if end.power_seconds else None
        else:
            return {
                **empty,
                "energy": f"unavailable ({end.samples} power readings in a {seconds:.2f} s window: too few)",
            }
        # One reading, rounded once: the samples per joule and the mean power are derived from the energy
        # the summary states, so a reader dividing its figures gets its figures back.
        joules = round(joules, 3) if joules is not None else None
        share = source.ranks / self.world_size if source.ranks else None
        per_joule = measured_samples * share / joules if joules and share else None
        return {
            "energy_joules": joules,
            "samples_per_joule": per_joule,
            "power_mean_w": round(joules / seconds, 2) if joules is not None and seconds > 0 else None,
            "power_peak_w": round(end.peak_w, 2) if end.peak_w is not None else None,
            "utilization_mean": (
                round(end.utilization_integral / end.utilization_seconds, 4)
                if end.utilization_seconds
                else None
            ),
            "energy": {
                "source": source.name,
                "method": getattr(source, "method", ""),
                "of": source.of,
                "utilization_of": getattr(source, "utilization_of", None),
                "window_s": round(seconds, 6),
                "readings": end.samples,
                "interval_s": source.interval_s,
                "samples_counted": (
                    f"{source.ranks} of {self.world_size} ranks' samples (those of the devices measured)"
                    if source.ranks
                    else "not computed: the devices measured are not known to be the job's"
                ),
            },
        }


def local_ranks() -> int:
    """The ranks of this node (torchrun's LOCAL_WORLD_SIZE, MPI's local size), 1 when started alone."""
    for name in (
        "LOCAL_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "MPI_LOCALNRANKS",
        "SLURM_NTASKS_PER_NODE",
    ):
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1
