"""What every trainer does first (the explicit loops, VOLO and ViT, also last).

Before: the notices of imports and settings chosen on purpose are silenced, and TF32 is set as
``--tf32`` asks before anything asks cuBLAS whether it may use it (precision.py). After: summary.json
is written, last, with what every loop reports beside its own fields, and the process group is left.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Sequence
from typing import Any

import torch.distributed as dist

from reprokit_trainers.common import vendor
from reprokit_trainers.common.measure import flops
from reprokit_trainers.common.measure.steps import StepLogger
from reprokit_trainers.common.process import precision
from reprokit_trainers.common.process.args import MfuArguments, arguments_dict, config_error
from reprokit_trainers.common.process.distributed import destroy_process_group


def quiet_notices(*messages: str) -> None:
    """Log at WARNING; silence the deprecation notices of torchvision and timm, and the warnings
    matching ``messages`` (the trainer's own choices that a library warns about)."""
    logging.basicConfig(level=logging.WARNING)
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # torchvision's JPEG decoder notice
    warnings.filterwarnings("ignore", message=".*torch.jit.interface", category=FutureWarning)  # timm import
    for message in messages:
        warnings.filterwarnings("ignore", message=message)


def require_accelerator(prog: str) -> None:
    """A cell planned for GPUs (run.sh says which: REPROKIT_ACCELERATOR) never trains on the CPU unseen,
    nor on fewer devices than its ranks: a process that sees no CUDA device, or a local rank beyond
    what it sees, ends the trainer in one line. Which accelerators train through torch.cuda (CUDA's,
    ROCm's over HIP) is their folder's TORCH_DEVICE; how their devices are made visible, MAKE_VISIBLE."""
    named = os.environ.get("REPROKIT_ACCELERATOR", "")
    try:
        accelerator = vendor.load(named) if named else None
    except ImportError:
        accelerator = None  # an accelerator with no trainer code: nothing here says how it trains
    if accelerator is None or getattr(accelerator, "TORCH_DEVICE", None) != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        raise config_error(
            prog,
            f"this cell was planned for {named} and this process sees no CUDA device: make the GPUs visible "
            f"({accelerator.MAKE_VISIBLE}) or plan it for --accelerator cpu",
        )
    local, count = int(os.environ.get("LOCAL_RANK", "0")), torch.cuda.device_count()
    if local >= count:
        raise config_error(
            prog,
            f"local rank {local} has no CUDA device: this process sees {count} (under MIG, one MIG device per "
            "process); run as many ranks per node as there are devices (--devices)",
        )


def set_tf32(prog: str, enabled: bool | None) -> dict[str, Any]:
    """TF32 as asked, and the state in effect (for sysinfo.json); one that does not hold ends the
    trainer in one line: an fp32 run that silently uses TF32 would be measured as fp32."""
    try:
        return precision.set_tf32(enabled)
    except RuntimeError as error:
        raise config_error(prog, str(error)) from None


def finish(
    logger: StepLogger,
    arguments: Sequence[Any],
    sample_flops: float | None,
    mfu_precision: str,
    **fields: Any,
) -> dict[str, Any] | None:
    """Write summary.json into the logger's run directory (rank 0; None elsewhere) with the trainer's
    ``fields``, then every argument of the run (``arguments``: its parsed dataclasses), the loop's
    final loss and the MFU over the peak of ``mfu_precision`` (flops.matmul_precision); then leave the
    process group."""
    meter = logger.meter
    peak = next(parsed.device_peak_tflops for parsed in arguments if isinstance(parsed, MfuArguments))
    world = dist.get_world_size() if dist.is_initialized() else 1  # as init_process_group returned it
    summary = logger.run_dir.write_summary(
        meter,
        status="ok",
        **fields,
        args=arguments_dict(*arguments),
        **logger.summary_fields(),
        **flops.summary_fields(sample_flops, meter.samples_per_second, world, peak, mfu_precision),
    )
    destroy_process_group()
    return summary
