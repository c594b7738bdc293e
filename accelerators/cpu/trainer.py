"""The CPU for the trainers (reprokit_trainers/common/vendor.py loads this file): energy from RAPL's
package counters (``/sys/class/powercap/intel-rapl:N/energy_uj``) where readable (Linux 5.10 and later
make them root's alone), read with wrap-around; utilization is the machine's CPUs as the kernel counts
them (psutil), all processes included. No device memory beside the host's. Never imports the kit."""

from __future__ import annotations

import glob
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprokit_trainers.common.measure.energy import Source, Unavailable

TORCH_DEVICE = "cpu"
POWERCAP = Path("/sys/class/powercap")


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


def energy_source(local_ranks: int) -> RaplSource:
    return rapl_source(local_ranks)


def device_memory() -> None:
    return None
