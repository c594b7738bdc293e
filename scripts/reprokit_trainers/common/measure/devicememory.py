"""The device's own view of a run's peak memory, beside the allocator's.

``torch.cuda.max_memory_allocated`` counts what torch's caching allocator handed out. DALI's memory
pools, nvJPEG's buffers (the GPU decode paths), the device context and the libraries' workspaces are
outside it, and they are what runs a device out of memory next to a model that fits. The driver
reports what it gave the process; read at the meter's boundaries (the warm-up's end, the logging
steps, the last step), its maximum is the run's peak as the device saw it. How a device is read is
its accelerator's (``device_memory`` in accelerators/<name>/trainer.py: NVML on NVIDIA, AMD SMI on
AMD), each reading saying what it is of (this process, or the whole device where the driver does not
list the process).

Nothing here raises: no device, no library, or a driver that cannot answer leave the fields None.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reprokit_trainers.common import vendor

Reading = tuple["int | None", "str | None"]


class DeviceMemory:
    """One device's memory as its driver reads it (``read``: the bytes and what they are of, or (None,
    None)); ``sample`` keeps the largest reading, one of the process alone (``process_of``) over one of
    the whole device at equal bytes."""

    def __init__(self, read: Callable[[], Reading], process_of: str) -> None:
        self.read = read
        self.process_of = process_of
        self.peak: int | None = None
        self.of: str | None = None

    def sample(self) -> None:
        used, of = self.read()
        if used is not None and (
            self.peak is None or used > self.peak or (used == self.peak and of == self.process_of)
        ):
            self.peak, self.of = used, of

    def fields(self) -> dict[str, Any]:
        return {"peak_memory_device_bytes": self.peak, "peak_memory_device_of": self.of}


def _for_this_process() -> DeviceMemory | None:
    """This run's accelerator's watch of this process's device; None where it has none (yet)."""
    import torch

    device_type = "cuda" if torch.cuda.is_available() and torch.cuda.is_initialized() else "cpu"
    try:
        return vendor.this_accelerator(device_type).device_memory()
    except ImportError:
        return None


class _Process:
    """This process's watch, made at the first boundary after the device is up."""

    watch: DeviceMemory | None = None
    made = False


def sample() -> None:
    """Read the device's view now (the meter's boundaries call this); nothing without one."""
    if not _Process.made:
        _Process.watch = _for_this_process()
        _Process.made = _Process.watch is not None
    if _Process.watch is not None:
        _Process.watch.sample()


def fields() -> dict[str, Any]:
    """summary.json's device peak: the bytes, and what they are of (None where the device could not say)."""
    sample()
    return (
        _Process.watch.fields()
        if _Process.watch is not None
        else {
            "peak_memory_device_bytes": None,
            "peak_memory_device_of": None,
        }
    )
