"""FLOPs of one training sample, counted, not estimated from a formula; and the MFU they imply.

Each trainer declares its FLOPs per sample (its ``flops_per_sample``) with ``count_training_flops``:
its model is built on the meta device (no memory, no weights) and one forward and backward pass
of a small batch runs under torch's FlopCounterMode, which counts the matmuls and convolutions
the step dispatches. Model FLOPs utilization (MFU) is then samples/s x FLOPs per sample over the
devices' dense peak in the precision the matmuls ran in: counting needs no GPU, only measuring the
samples/s does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from reprokit_trainers.common.process.distributed import is_main_process, log

# Dense (no sparsity) peaks from the vendors' datasheets, in TFLOP/s, by a substring of
# torch.cuda.get_device_name() (the first match wins) and by the precision the matmuls ran in: bf16 or
# fp16 tensor cores, TF32 tensor cores (fp32 with TF32 on), plain fp32 (TF32 off). An fp32 rung is held
# to its own peak: against the bf16 one its MFU would read 15 to 50 times too low.
PEAK_TFLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.0}),
    ("H100 NVL", {"bf16": 835.0, "fp16": 835.0, "tf32": 417.5, "fp32": 60.0}),
    ("H100", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 67.0}),  # SXM5 (HBM3)
    ("H200", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 67.0}),
    ("GH200", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 67.0}),
    ("A100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
)
PRECISIONS = ("bf16", "fp16", "tf32", "fp32")


def matmul_precision(mixed_precision: str | None, tf32: bool) -> str:
    """The precision a step's matmuls ran in, from its mixed-precision mode as recorded (amp-bf16,
    pure-fp16, fp32; or an --amp value: fp16, bf16, no) and whether TF32 was on."""
    text = (mixed_precision or "").lower()
    for half in ("bf16", "fp16"):
        if half in text:
            return half
    return "tf32" if tf32 else "fp32"


def count_training_flops(
    build: Callable[[], torch.nn.Module],
    step: Callable[[torch.nn.Module, int], torch.Tensor],
    batch: int = 2,
) -> float:
    """FLOPs per sample of ``step(model, batch).backward()`` on the model ``build()`` makes, in train mode.

    ``step`` runs the forward pass on a batch of zeros and returns what backward starts from;
    a batch of 2 keeps batch-wise losses (contrastive ones) meaningful.
    """
    # Here, not at import: torch's counter imports triton (0.2 s), which a rank that counts nothing and a
    # command line refused before the count never use.
    from torch.utils.flop_counter import FlopCounterMode

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


def peak_tflops(device_name: str, precision: str = "bf16") -> float | None:
    """The datasheet peak of a device by its name, for matmuls in ``precision``; None for devices not in
    the table (CPUs)."""
    for key, peaks in PEAK_TFLOPS:
        if key in device_name:
            return peaks[precision]
    return None


def device_peak_tflops(override: float | None = None, precision: str = "bf16") -> float | None:
    """This process's device peak: ``override`` when given (e.g. a measured matmul rate), else the
    table's for the CUDA device in ``precision``, else None."""
    if override is not None:
        return override
    if torch.cuda.is_available():
        return peak_tflops(torch.cuda.get_device_name(torch.cuda.current_device()), precision)
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
    precision: str = "bf16",
) -> dict[str, Any]:
    """What summary.json says of the run's FLOPs: per sample, the device peak (``device_peak``,
    e.g. ``--device_peak_tflops``, else this device's datasheet peak for matmuls in ``precision``,
    the one the run's matmuls ran in: matmul_precision) and the MFU over it."""
    if precision not in PRECISIONS:
        raise ValueError(f"MFU precision {precision!r}: one of {', '.join(PRECISIONS)}")
    peak = device_peak_tflops(device_peak, precision)
    return {
        "flops_per_sample": flops_per_sample,
        "device_peak_tflops": peak,
        "mfu_precision": precision,
        "mfu": mfu(flops_per_sample, samples_per_second, peak, world_size),
    }
