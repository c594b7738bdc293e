"""AMD Instinct GPUs for the trainers (reprokit_trainers/common/vendor.py loads this file): energy
through AMD SMI's Python library (``amdsmi``): each GPU's energy accumulator (ticks of
``counter_resolution`` microjoules), its socket power and its graphics activity, read in process as
NVML's are; and the driver's view of this process's memory on its GPU. The library is ROCm's
(``/opt/rocm/share/amd_smi`` where the image did not pip-install it); without it, or without a GPU
it can read, the fields say why, never a guess. Imports torch and amdsmi only when asked; never the kit.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

from reprokit_trainers.common.measure.devicememory import DeviceMemory
from reprokit_trainers.common.measure.energy import CounterSource, Unavailable, unavailable_on

TORCH_DEVICE = "cuda"  # ROCm's torch is CUDA's API over HIP
MAKE_VISIBLE = "docker --device=/dev/kfd --device=/dev/dri, apptainer --rocm, srun --gpus"
PROCESS = "amdsmi: this process"
DEVICE = "amdsmi: the whole device (this process is not in AMD SMI's list, e.g. another PID namespace)"


def library() -> Any:
    """AMD SMI's Python module: installed, else from the ROCm tree where ROCm puts it."""
    try:
        return importlib.import_module("amdsmi")
    except ImportError:
        pass
    shipped = Path(os.environ.get("ROCM_PATH", "/opt/rocm")) / "share" / "amd_smi"
    if not (shipped / "amdsmi").is_dir():
        raise Unavailable(f"AMD SMI's Python library (amdsmi) is not installed, nor in {shipped}")
    sys.path.append(str(shipped))
    try:
        return importlib.import_module("amdsmi")
    except ImportError as error:
        raise Unavailable(f"amdsmi from {shipped}: {error}") from None


def _errors(smi: Any) -> tuple[type[BaseException], ...]:
    # A reading that is "N/A" (a GPU or driver without it) is a missing reading, as the library's own errors.
    return (smi.AmdSmiException, ValueError, TypeError, KeyError)


def _number(value: Any) -> float:
    if isinstance(value, dict):  # {"value": ..., "unit": ...} in newer AMD SMI releases
        value = value.get("value")
    return float(value)  # "N/A" raises ValueError: no reading


def _energy_mj(smi: Any, handle: Any) -> float:
    found = smi.amdsmi_get_energy_count(handle)
    # ROCm 6.0-6.2 name the accumulator `power`, 6.3 on `energy_accumulator`; ticks of the resolution (uJ).
    ticks = found.get("energy_accumulator", found.get("power"))
    return _number(ticks) * _number(found["counter_resolution"]) / 1e3


def _power_mw(smi: Any, handle: Any) -> float:
    found = smi.amdsmi_get_power_info(handle)
    watts = found.get("current_socket_power")
    if watts in (None, "N/A"):
        watts = found.get("average_socket_power")
    return _number(watts) * 1e3


def amdsmi_source(bdfs: list[str] | None, ranks: int, smi: Any = None) -> CounterSource:
    """The GPUs at PCI addresses `bdfs` (as torch reports them; None: every GPU AMD SMI lists)."""
    smi = smi or library()
    with unavailable_on(Exception, "amdsmi"):  # AMD SMI raises its own errors and OSError (no libamd_smi)
        smi.amdsmi_init()
    with unavailable_on(smi.AmdSmiException, "amdsmi", shutdown=smi.amdsmi_shut_down):
        if bdfs is None:
            handles = list(smi.amdsmi_get_processor_handles())
        else:
            handles = [smi.amdsmi_get_processor_handle_from_bdf(bdf) for bdf in bdfs]
        if not handles:
            raise Unavailable("AMD SMI lists no GPU")
        name = smi.amdsmi_get_gpu_asic_info(handles[0]).get("market_name", "AMD GPU")
    return CounterSource(
        "AMD SMI",
        handles,
        of=f"{len(handles)} x {name}" + ("" if bdfs is not None else " (every GPU AMD SMI lists)"),
        # Readings of every GPU listed are the job's only when it used them all.
        ranks=len(handles) if bdfs is not None or ranks == len(handles) else None,
        utilization_of="GPU graphics activity (AMD SMI's gfx_activity)",
        energy_mj=lambda handle: _energy_mj(smi, handle),
        power_mw=lambda handle: _power_mw(smi, handle),
        busy_percent=lambda handle: _number(smi.amdsmi_get_gpu_activity(handle)["gfx_activity"]),
        error=_errors(smi),
        shutdown=smi.amdsmi_shut_down,
    )


def _bdf(props: Any) -> str | None:
    try:
        return f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    except AttributeError:  # a torch whose device properties have no PCI address
        return None


def energy_source(local_ranks: int) -> CounterSource:
    """This node's GPUs of the run's ranks, found by their PCI addresses (HIP's order need not be AMD
    SMI's); every GPU AMD SMI lists where torch gives no address."""
    import torch

    count = min(local_ranks, torch.cuda.device_count())
    bdfs = [_bdf(torch.cuda.get_device_properties(index)) for index in range(count)]
    return amdsmi_source(None if None in bdfs or not bdfs else bdfs, local_ranks)  # type: ignore[arg-type]


def amdsmi_memory(smi: Any, handle: Any, pid: int | None = None) -> DeviceMemory:
    """AMD SMI's view of one GPU's memory for process `pid` (default this one): the VRAM the driver
    gave it, else, where AMD SMI does not list it, the GPU's used VRAM, saying so."""
    pid = os.getpid() if pid is None else pid

    def read() -> tuple[int | None, str | None]:
        try:
            for process in smi.amdsmi_get_gpu_process_list(handle):
                info = (
                    process if isinstance(process, dict) else smi.amdsmi_get_gpu_process_info(handle, process)
                )
                used = (info.get("memory_usage") or {}).get("vram_mem")
                if info.get("pid") == pid and used:
                    return int(_number(used)), PROCESS
            return int(smi.amdsmi_get_gpu_memory_usage(handle, smi.AmdSmiMemoryType.VRAM)), DEVICE
        except _errors(smi):
            return None, None

    return DeviceMemory(read, PROCESS)


def device_memory() -> DeviceMemory | None:
    """The watch of this process's GPU, by its PCI address; None without an initialized device or AMD SMI."""
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return None
    bdf = _bdf(torch.cuda.get_device_properties(torch.cuda.current_device()))
    if bdf is None:
        return None
    try:
        smi = library()
        smi.amdsmi_init()
        return amdsmi_memory(smi, smi.amdsmi_get_processor_handle_from_bdf(bdf))
    except Unavailable:
        return None
    except Exception:  # noqa: BLE001 -- the library's errors, or no libamd_smi: the peak stays unknown
        return None
