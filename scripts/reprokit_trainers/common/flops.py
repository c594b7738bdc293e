"""FLOPs of one training sample, counted, not estimated from a formula; and the MFU they imply.

Each trainer declares its FLOPs per sample (its ``flops_per_sample``) with ``count_training_flops``:
its model is built on the meta device (no memory, no weights) and one forward and backward pass
of a small batch runs under torch's FlopCounterMode, which counts the matmuls and convolutions
the step dispatches. Model FLOPs utilization (MFU) is then samples/s x FLOPs per sample over the
devices' dense bf16/fp16 peak: counting needs no GPU, only measuring the samples/s does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from .distributed import is_main_process, log

# Dense (no sparsity) bf16/fp16 tensor-core peaks from the vendors' datasheets, in TFLOP/s, by a
# substring of torch.cuda.get_device_name(). Order matters: the first match wins.
PEAK_TFLOPS = (
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.4),  # SXM5 (HBM3)
    ("H200", 989.4),
    ("GH200", 989.4),
    ("A100", 312.0),
)


def count_training_flops(
    build: Callable[[], torch.nn.Module],
    step: Callable[[torch.nn.Module, int], torch.Tensor],
    batch: int = 2,
) -> float:
    """FLOPs per sample of ``step(model, batch).backward()`` on the model ``build()`` makes, in train mode.

    ``step`` runs the forward pass on a batch of zeros and returns what backward starts from;
    a batch of 2 keeps batch-wise losses (contrastive ones) meaningful.
    """
    with torch.device("meta"):
        model = build()
        model.train()
        with FlopCounterMode(display=False) as counter:
            step(model, batch).backward()
    return counter.get_total_flops() / batch


def count_on_main_process(count: Callable[[], float]) -> float | None:
    """``count()`` on global rank 0 only (the one that writes summary.json), with what it took.

    Called before the first training step, so the count is never inside the timed steps.
    """
    if not is_main_process():
        return None
    start = time.perf_counter()
    flops = count()
    log(
        f"{flops / 1e9:.4g} GFLOP per training sample (counted on the meta device in {time.perf_counter() - start:.1f} s)"
    )
    return flops


def peak_tflops(device_name: str) -> float | None:
    """The datasheet peak of a device by its name; None for devices not in the table (CPUs)."""
    for key, peak in PEAK_TFLOPS:
        if key in device_name:
            return peak
    return None


def device_peak_tflops(override: float | None = None) -> float | None:
    """This process's device peak: ``override`` when given (e.g. a measured bf16 matmul rate), else
    the table's for the CUDA device, else None."""
    if override is not None:
        return override
    if torch.cuda.is_available():
        return peak_tflops(torch.cuda.get_device_name(torch.cuda.current_device()))
    return None


def mfu(
    flops_per_sample: float | None, per_second: float | None, peak: float | None, devices: int = 1
) -> float | None:
    """Model FLOPs utilization of ``devices`` devices of ``peak`` TFLOP/s together at ``per_second``
    samples/s; None when any of them is unknown."""
    if not flops_per_sample or not per_second or not peak:
        return None
    return flops_per_sample * per_second / (devices * peak * 1e12)


def summary_fields(
    flops_per_sample: float | None,
    samples_per_second: float | None,
    world_size: int,
    device_peak: float | None = None,
) -> dict[str, Any]:
    """What summary.json says of the run's FLOPs: per sample, the device peak (``device_peak``,
    e.g. ``--device_peak_tflops``, else this device's datasheet peak) and the MFU."""
    peak = device_peak_tflops(device_peak)
    return {
        "flops_per_sample": flops_per_sample,
        "device_peak_tflops": peak,
        "mfu": mfu(flops_per_sample, samples_per_second, peak, world_size),
    }
