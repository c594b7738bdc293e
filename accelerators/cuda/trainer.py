"""NVIDIA GPUs for the trainers (reprokit_trainers/common/vendor.py loads this file): energy through
NVML's total-energy counter (millijoules since the driver loaded, exact on Volta and newer; on a GPU
without it, the sampled power integrated, and said so), and the device's own view of a process's peak
memory. Imports torch and pynvml (nvidia-ml-py) only when asked; never the kit."""

from __future__ import annotations

import os
from typing import Any

from reprokit_trainers.common.measure.devicememory import DeviceMemory
from reprokit_trainers.common.measure.energy import CounterSource, unavailable_on, vendor_library

TORCH_DEVICE = "cuda"
# How a container or a job step is made to see the GPUs (said when a rank sees none).
MAKE_VISIBLE = "docker --gpus all, apptainer --nv, srun --gpus"
PROCESS = "nvml: this process"
DEVICE = "nvml: the whole device (this process is not in NVML's list, e.g. another PID namespace)"


def nvml_source(devices: list[int | str], nvml: Any = None) -> CounterSource:
    """The GPUs ``devices`` (NVML indices, or UUIDs as torch reports them) through NVML."""
    nvml = nvml or vendor_library("pynvml", "nvidia-ml-py")
    with unavailable_on(nvml.NVMLError, "NVML"):
        nvml.nvmlInit()
    with unavailable_on(nvml.NVMLError, "NVML", shutdown=nvml.nvmlShutdown):
        handles = [
            nvml.nvmlDeviceGetHandleByUUID(d) if isinstance(d, str) else nvml.nvmlDeviceGetHandleByIndex(d)
            for d in devices
        ]
        name = nvml.nvmlDeviceGetName(handles[0])
    name = name.decode() if isinstance(name, bytes) else name
    return CounterSource(
        "NVML",
        handles,
        of=f"{len(handles)} x {name}",
        ranks=len(handles),
        utilization_of="GPU utilization (time a kernel ran, as NVML samples it)",
        energy_mj=nvml.nvmlDeviceGetTotalEnergyConsumption,
        power_mw=nvml.nvmlDeviceGetPowerUsage,
        busy_percent=lambda handle: nvml.nvmlDeviceGetUtilizationRates(handle).gpu,
        error=nvml.NVMLError,
        shutdown=nvml.nvmlShutdown,
    )


def energy_source(local_ranks: int) -> CounterSource:
    """This node's GPUs of the run's ranks, through NVML."""
    import torch

    devices: list[int | str] = []
    for index in range(min(local_ranks, torch.cuda.device_count())):
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        # NVML's order is the PCI bus's, CUDA's need not be: the UUID names the same GPU for both.
        devices.append(f"GPU-{uuid}" if uuid is not None else index)
    return nvml_source(devices)


def nvml_memory(nvml: Any, handle: Any, pid: int | None = None) -> DeviceMemory:
    """NVML's view of one device's memory for process `pid` (default this one): what the driver gave
    the process (its entry in the device's compute processes), else, where NVML does not list it (a
    container's PID namespace: NVML names host pids), the device's used memory, saying so."""
    pid = os.getpid() if pid is None else pid

    def read() -> tuple[int | None, str | None]:
        try:
            for process in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if process.pid == pid and process.usedGpuMemory:
                    return int(process.usedGpuMemory), PROCESS
            return int(nvml.nvmlDeviceGetMemoryInfo(handle).used), DEVICE
        except nvml.NVMLError:
            return None, None

    return DeviceMemory(read, PROCESS)


def device_memory() -> DeviceMemory | None:
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
        return nvml_memory(pynvml, find(bus))
    except pynvml.NVMLError:
        return None
