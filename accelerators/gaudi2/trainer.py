"""Intel Gaudi HPUs for the trainers (reprokit_trainers/common/vendor.py loads this file): energy through
HLML (Habana's ``pyhlml``) where it is installed, its total-energy counter in millijoules read in
process as NVML's is; else hl-smi's power draw and utilization sampled (one call a second: hl-smi is a
program), the power integrated over the window, its ``method`` saying why HLML was not used. No
device-memory watch: the summary's device peak stays unknown. Never imports the kit."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

from reprokit_trainers.common.measure.energy import (
    CounterSource,
    Source,
    Unavailable,
    unavailable_on,
    vendor_library,
)

TORCH_DEVICE = "hpu"
HL_SMI_INTERVAL_S = 1.0  # hl-smi is a process per reading
HL_SMI_TIMEOUT_S = 10


def hlml_source(ranks: int, hlml: Any = None) -> CounterSource:
    """The AIPs through pyhlml; Unavailable says why not (not installed, no driver, no AIP)."""
    hlml = hlml or vendor_library("pyhlml", "pyhlml")
    with unavailable_on(Exception, "pyhlml"):  # pyhlml raises its own errors and OSError (no libhlml)
        hlml.hlmlInit()
    with unavailable_on(hlml.HLMLError, "pyhlml", shutdown=hlml.hlmlShutdown):
        handles = [hlml.hlmlDeviceGetHandleByIndex(i) for i in range(hlml.hlmlDeviceGetCount())]
        if not handles:
            raise Unavailable("HLML lists no AIP")
    return CounterSource(
        "HLML",
        handles,
        of=f"{len(handles)} AIP(s) HLML lists",
        # The readings are of every AIP: they are the job's only when it used them all.
        ranks=ranks if ranks == len(handles) else None,
        utilization_of="AIP utilization (HLML)",
        energy_mj=hlml.hlmlDeviceGetTotalEnergyConsumption,
        power_mw=hlml.hlmlDeviceGetPowerUsage,
        busy_percent=hlml.hlmlDeviceGetUtilizationRates,
        error=hlml.HLMLError,
        shutdown=hlml.hlmlShutdown,
    )


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


def energy_source(local_ranks: int) -> Source:
    """The AIPs through HLML, else hl-smi (saying why HLML did not answer)."""
    try:
        return hlml_source(local_ranks)
    except Unavailable as why:
        without = str(why)
    if shutil.which("hl-smi") is None:
        raise Unavailable(f"{without}, and no hl-smi on PATH")
    source = HlSmiSource(local_ranks)
    source.method = f"{source.method}, by hl-smi ({without})"
    return source


def device_memory() -> None:
    return None
