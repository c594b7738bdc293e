"""TF32, set explicitly for every run and recorded: an fp32 rung that silently runs TF32 matmuls
is several times faster than fp32 and collapses a ladder's speedups.

NGC's PyTorch images set ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1``, which turns TF32 on for cuBLAS
whatever ``torch.backends.cuda.matmul.allow_tf32`` says. torch reads that variable once, the first
time anything asks whether cuBLAS may use TF32, so the trainer sets it before that moment and then
reads the effective state back: if it cannot have its way, it stops with one line.
"""

from __future__ import annotations

import os
from typing import Any

import torch

OVERRIDE = "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"


def set_tf32(enabled: bool | None) -> dict[str, Any]:
    """Turn TF32 matmuls and convolutions on or off (None: leave the framework's defaults) and
    return the state in effect, for sysinfo.json. Raises RuntimeError when it could not be set."""
    if enabled is not None:
        os.environ[OVERRIDE] = "1" if enabled else "0"
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled
        torch.set_float32_matmul_precision("high" if enabled else "highest")
    state = tf32_state()
    if enabled is not None and state["tf32_matmul"] != enabled:
        raise RuntimeError(
            f"TF32 matmuls could not be turned {'on' if enabled else 'off'}: torch read {OVERRIDE} before "
            "the trainer set it (unset it in the image or the environment)"
        )
    return state


def tf32_state() -> dict[str, Any]:
    """What is in effect: cuBLAS and cuDNN TF32, the float32 matmul precision, the override variable."""
    return {
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        OVERRIDE: os.environ.get(OVERRIDE),
    }
