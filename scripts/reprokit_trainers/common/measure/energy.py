"""Energy and utilization over the meter's measured window, from what the hardware itself reports.

- NVIDIA: NVML's total-energy counter (millijoules since the driver loaded, exact on Volta and newer)
  read at the meter's boundaries, and power and utilization sampled by a thread; on a GPU without
  the counter, the sampled power integrated over the window, and said so.
- Gaudi: HLML through Habana's ``pyhlml`` where it is installed (the total-energy counter in
  millijoules, read in process as NVML's is); else hl-smi's power draw and utilization sampled by the
  thread (one call a second: hl-smi is a program), the power integrated over the window, its
  ``method`` saying why HLML was not used.
- CPU: RAPL's package counters (``/sys/class/powercap/intel-rapl:N/energy_uj``) where readable (Linux
  5.10 and later make them root's alone), read with wrap-around; utilization is the machine's CPUs
  as the kernel counts them (psutil), all processes included.

Where none answers, ``energy`` says ``unavailable (why)`` and the numbers are None: never a guess.
Only rank 0 samples, its node's devices: the samples per joule are the samples those devices' ranks
trained (every rank trains as many per step). This module must not import the kit.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

POWERCAP = Path("/sys/class/powercap")
SAMPLE_INTERVAL_S = 0.2  # 5 Hz: NVML and sysfs reads cost microseconds
HL_SMI_INTERVAL_S = 1.0  # hl-smi is a process per reading
HL_SMI_TIMEOUT_S = 10


class Unavailable(Exception):
    """No energy source on this machine; the message says why, in a few words."""


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


class NvmlSource(Source):
    """The GPUs behind ``handles`` through NVML (pynvml, nvidia-ml-py's module)."""

    name = "NVML"

    def __init__(self, nvml: Any, handles: list[Any], of: str) -> None:
        self.nvml, self.handles, self.of, self.ranks = nvml, handles, of, len(handles)
        self.utilization_of = "GPU utilization (time a kernel ran, as NVML samples it)"
        try:
            self._base = self._energy_mj()
            self.has_counter = True
        except nvml.NVMLError:
            self._base = 0  # a GPU before Volta: integrate the sampled power instead
        self.method = "total energy counter" if self.has_counter else "sampled power, integrated"

    def _energy_mj(self) -> int:
        return sum(self.nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in self.handles)

    def counter(self) -> float | None:
        return (self._energy_mj() - self._base) / 1e3 if self.has_counter else None

    def sample(self) -> tuple[float | None, float | None]:
        try:
            watts = sum(self.nvml.nvmlDeviceGetPowerUsage(h) for h in self.handles) / 1e3
        except self.nvml.NVMLError:
            watts = None
        try:
            busy = [self.nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self.handles]
            utilization = sum(busy) / len(busy) / 100
        except self.nvml.NVMLError:
            utilization = None
        return watts, utilization

    def close(self) -> None:
        with contextlib.suppress(self.nvml.NVMLError):
            self.nvml.nvmlShutdown()


@dataclass
class _Zone:
    path: Path
    range_uj: int
    last_uj: int
    total_uj: int = 0


class RaplSource(Source):
    """The CPU packages' RAPL energy counters in a powercap folder."""

    name = "RAPL"
    has_counter = True
    method = "package energy counters"

    def __init__(self, zones: list[Path], ranks: int) -> None:
        self._zones = []
        for zone in zones:
            max_range = zone / "max_energy_range_uj"
            self._zones.append(
                _Zone(zone / "energy_uj", int(max_range.read_text()), int((zone / "energy_uj").read_text()))
            )
        names = [_read(zone / "name") or zone.name for zone in zones]
        self.of = f"CPU {', '.join(names)} (RAPL; the whole package: other processes on it count too)"
        self.ranks = ranks
        self.utilization_of = "the machine's CPUs busy, all processes (psutil)"
        self._lock = threading.Lock()
        self._psutil = _psutil()
        if self._psutil is not None:
            self._psutil.cpu_percent(None)  # the first call only starts psutil's own interval

    def counter(self) -> float:
        # The counters wrap at max_energy_range_uj (tens of minutes at full power): every read adds the
        # delta since the last one, so reading at least once per wrap period (the sampler does) is exact.
        with self._lock:
            for zone in self._zones:
                now = int(zone.path.read_text())
                delta = now - zone.last_uj
                if delta < 0:
                    delta += zone.range_uj + 1
                zone.total_uj += delta
                zone.last_uj = now
            return sum(zone.total_uj for zone in self._zones) / 1e6

    def sample(self) -> tuple[float | None, float | None]:
        # No instantaneous power in RAPL: the sampler derives it from the counter.
        busy = self._psutil.cpu_percent(None) / 100 if self._psutil is not None else None
        return None, busy


class HlmlSource(Source):
    """Every AIP HLML lists, through pyhlml: its energy counter, power and utilization, in process."""

    name = "HLML"

    def __init__(self, hlml: Any, handles: list[Any], ranks: int) -> None:
        self.hlml, self.handles = hlml, handles
        self.of = f"{len(handles)} AIP(s) HLML lists"
        # The readings are of every AIP: they are the job's only when it used them all.
        self.ranks = ranks if ranks == len(handles) else None
        self.utilization_of = "AIP utilization (HLML)"
        try:
            self._base = self._energy_mj()
            self.has_counter = True
        except hlml.HLMLError:
            self._base = 0
        self.method = "total energy counter" if self.has_counter else "sampled power, integrated"

    def _energy_mj(self) -> int:
        return sum(self.hlml.hlmlDeviceGetTotalEnergyConsumption(h) for h in self.handles)

    def counter(self) -> float | None:
        return (self._energy_mj() - self._base) / 1e3 if self.has_counter else None

    def sample(self) -> tuple[float | None, float | None]:
        try:
            watts = sum(self.hlml.hlmlDeviceGetPowerUsage(h) for h in self.handles) / 1e3
        except self.hlml.HLMLError:
            watts = None
        try:
            busy = [self.hlml.hlmlDeviceGetUtilizationRates(h) for h in self.handles]
            utilization = sum(busy) / len(busy) / 100
        except self.hlml.HLMLError:
            utilization = None
        return watts, utilization

    def close(self) -> None:
        with contextlib.suppress(self.hlml.HLMLError):
            self.hlml.hlmlShutdown()


def hlml_source(ranks: int, hlml: Any = None) -> HlmlSource:
    """The AIPs through pyhlml; Unavailable says why not (not installed, no driver, no AIP)."""
    if hlml is None:
        try:
            import pyhlml as hlml
        except ImportError:
            raise Unavailable("pyhlml is not installed") from None
    try:
        hlml.hlmlInit()
    except Exception as error:  # noqa: BLE001 -- pyhlml raises its own errors and OSError (no libhlml)
        raise Unavailable(f"pyhlml: {error}") from None
    try:
        handles = [hlml.hlmlDeviceGetHandleByIndex(i) for i in range(hlml.hlmlDeviceGetCount())]
    except hlml.HLMLError as error:
        hlml.hlmlShutdown()
        raise Unavailable(f"pyhlml: {error}") from None
    if not handles:
        hlml.hlmlShutdown()
        raise Unavailable("HLML lists no AIP")
    return HlmlSource(hlml, handles, ranks)


class HlSmiSource(Source):
    """The AIPs hl-smi lists: power draw and utilization, a reading a second."""

    name = "hl-smi"
    interval_s = HL_SMI_INTERVAL_S
    method = "sampled power, integrated"

    def __init__(self, ranks: int) -> None:
        count = len(self._rows())
        if count == 0:
            raise Unavailable("hl-smi lists no AIP")
        self.of = f"{count} AIP(s) hl-smi lists"
        # The readings are of every AIP hl-smi lists: they are the job's only when it used them all.
        self.ranks = ranks if ranks == count else None
        self.utilization_of = "AIP utilization (hl-smi)"

    def _rows(self) -> list[list[float | None]]:
        try:
            done = subprocess.run(
                ["hl-smi", "-Q", "power.draw,utilization.aip", "-f", "csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=HL_SMI_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise Unavailable(f"hl-smi: {error}") from None
        if done.returncode != 0:
            raise Unavailable(f"hl-smi -Q exited {done.returncode}")
        rows = [
            [_number(cell) for cell in line.split(",")] for line in done.stdout.splitlines() if line.strip()
        ]
        return [row for row in rows if len(row) == 2]

    def sample(self) -> tuple[float | None, float | None]:
        try:
            rows = self._rows()
        except Unavailable:
            return None, None
        watts = [w for w, _ in rows if w is not None]
        busy = [u for _, u in rows if u is not None]
        return (sum(watts) if watts else None), (sum(busy) / len(busy) / 100 if busy else None)


def _number(text: str) -> float | None:
    try:
        return float(text.strip().split()[0])
    except (ValueError, IndexError):
        return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _psutil() -> Any:
    try:
        import psutil
    except ImportError:
        return None
    return psutil


def rapl_zones(powercap: Path = POWERCAP) -> list[Path]:
    """The top-level RAPL zones (packages, psys): their subzones (cores, dram) are inside them."""
    found = sorted(Path(p) for p in glob.glob(str(powercap / "intel-rapl:*")))
    return [p for p in found if p.name.count(":") == 1]


def rapl_source(ranks: int, powercap: Path = POWERCAP) -> RaplSource:
    zones = rapl_zones(powercap)
    if not zones:
        why = "no RAPL counters" if powercap.is_dir() else f"no {powercap}"
        raise Unavailable(f"{why} on this machine")
    for zone in zones:
        try:
            int((zone / "energy_uj").read_text())
            int((zone / "max_energy_range_uj").read_text())
        except OSError as error:
            raise Unavailable(f"{zone / 'energy_uj'} is not readable ({error.strerror or error})") from None
        except ValueError:
            raise Unavailable(f"{zone / 'energy_uj'} holds no counter") from None
    return RaplSource(zones, ranks)


def nvml_source(devices: list[int | str], nvml: Any = None) -> NvmlSource:
    """The GPUs ``devices`` (NVML indices, or UUIDs as torch reports them) through NVML."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            raise Unavailable("nvidia-ml-py is not installed") from None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as error:
        raise Unavailable(f"NVML: {error}") from None
    try:
        handles = [
            nvml.nvmlDeviceGetHandleByUUID(d) if isinstance(d, str) else nvml.nvmlDeviceGetHandleByIndex(d)
            for d in devices
        ]
        name = nvml.nvmlDeviceGetName(handles[0])
    except nvml.NVMLError as error:
        nvml.nvmlShutdown()
        raise Unavailable(f"NVML: {error}") from None
    name = name.decode() if isinstance(name, bytes) else name
    return NvmlSource(nvml, handles, f"{len(handles)} x {name}")


def this_machine(device_type: str, local_ranks: int) -> Source:
    """The source for this machine's accelerator (or CPU); Unavailable says why there is none."""
    if device_type == "cuda":
        import torch

        devices: list[int | str] = []
        for index in range(min(local_ranks, torch.cuda.device_count())):
            uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
            # NVML's order is the PCI bus's, CUDA's need not be: the UUID names the same GPU for both.
            devices.append(f"GPU-{uuid}" if uuid is not None else index)
        return nvml_source(devices)
    if device_type == "hpu":
        try:
            return hlml_source(local_ranks)
        except Unavailable as why:
            without = str(why)
        if shutil.which("hl-smi") is None:
            raise Unavailable(f"{without}, and no hl-smi on PATH")
        source = HlSmiSource(local_ranks)
        source.method = f"{source.method}, by hl-smi ({without})"
        return source
    return rapl_source(local_ranks)


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
