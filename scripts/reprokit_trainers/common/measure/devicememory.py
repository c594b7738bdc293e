"""The device's own view of a run's peak memory (NVML), beside the allocator's.

``torch.cuda.max_memory_allocated`` counts what torch's caching allocator handed out. DALI's memory
pools, nvJPEG's buffers (the GPU decode paths), the CUDA context and the libraries' workspaces are
outside it, and they are what runs a device out of memory next to a model that fits. NVML reports
what the driver gave the process (``usedGpuMemory`` of its entry in the device's compute processes);
read at the meter's boundaries (the warm-up's end, the logging steps, the last step), its maximum is
the run's peak as the device saw it. Where the process is missing from that list (a container's PID
namespace: NVML names host pids), the device's used memory is read instead, and the summary says so.

Nothing here raises: no CUDA, no NVML, or a driver that cannot answer leave the fields None.
"""

from __future__ import annotations

import os
from typing import Any

PROCESS = "nvml: this process"
DEVICE = "nvml: the whole device (this process is not in NVML's list, e.g. another PID namespace)"


class DeviceMemory:
    """NVML's view of one device's memory for this process; ``sample`` keeps the largest reading."""

    def __init__(self, nvml: Any, handle: Any, pid: int | None = None) -> None:
        self.nvml = nvml
        self.handle = handle
        self.pid = os.getpid() if pid is None else pid
        self.peak: int | None = None
        self.of: str | None = None

    def read(self) -> tuple[int | None, str | None]:
        try:
            for process in self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle):
                if process.pid == self.pid and process.usedGpuMemory:
                    return int(process.usedGpuMemory), PROCESS
            return int(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used), DEVICE
        except self.nvml.NVMLError:
            return None, None

    def sample(self) -> None:
        used, of = self.read()
        if used is not None and (
            self.peak is None or used > self.peak or (used == self.peak and of == PROCESS)
        ):
            self.peak, self.of = used, of

    def fields(self) -> dict[str, Any]:
        return {"peak_memory_device_bytes": self.peak, "peak_memory_device_of": self.of}


def _for_this_process() -> DeviceMemory | None:
    """The watch of this process's CUDA device, found by its PCI address (CUDA's and NVML's device
    orders differ); None without an initialized CUDA device or NVML."""
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return None
    try:
        import pynvml
    except ImportError:
        return None
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    try:
        bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    except AttributeError:  # a torch whose device properties have no PCI address
        return None
    find = getattr(pynvml, "nvmlDeviceGetHandleByPciBusId_v2", None) or pynvml.nvmlDeviceGetHandleByPciBusId
    try:
        pynvml.nvmlInit()
        return DeviceMemory(pynvml, find(bus))
    except pynvml.NVMLError:
        return None


class _Process:
    """This process's watch, made at the first boundary after CUDA is up."""

    watch: DeviceMemory | None = None
    made = False


def sample() -> None:
    """Read NVML's view now (the meter's boundaries call this); nothing without CUDA and NVML."""
    if not _Process.made:
        _Process.watch = _for_this_process()
        _Process.made = _Process.watch is not None
    if _Process.watch is not None:
        _Process.watch.sample()


def fields() -> dict[str, Any]:
    """summary.json's NVML peak: the bytes, and what they are of (None where NVML could not say)."""
    sample()
    return _Process.watch.fields() if _Process.watch is not None else DeviceMemory(None, None).fields()
