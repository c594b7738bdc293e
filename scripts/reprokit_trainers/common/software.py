"""The software a run actually used, read back from the objects that ran: summary.json's ``software``.

A published cell is judged only if it ran its publication's kernels (the recipe's
``published_software.kernels``); the host compares this record with them key by key, so each value
here is read from what ran (the optimizer's resolved flags, torch's TF32 switches, the DDP
reducer's buckets), never copied from the command line. The keys are the host's ``SOFTWARE_KEYS``
(reprokit/plan/recipes.py; trainers do not import the host package): attention, optimizer, ddp,
tf32, mixed_precision, data_path. This module reads the generic ones; a trainer adds what only it
knows (which attention path its modules took, its loader).

Values are short, stable words, because the host compares them as text with the recipe's:

- ``optimizer``: ``<class>-<implementation>``, e.g. ``adamw-per-tensor`` (torch's loop over the
  parameter tensors, what torch <= 1.10 ran), ``adamw-foreach`` (multi-tensor), ``adamw-fused``.
- ``tf32``: ``on`` or ``off`` (matmuls and convolutions alike), ``matmul on, cudnn off`` (or the
  reverse) when they differ, ``not used (cpu)`` where the device has no TF32.
- ``mixed_precision``: ``fp32``, or ``<dtype>-autocast`` with ``+dynamic-loss-scale`` when a
  GradScaler scales the loss.
- ``ddp``: ``allreduce-after-backward`` (every gradient reduced in one bucket once backward is
  done, what Apex ``DDP(delay_allreduce=True)`` did), ``overlap`` (several buckets reduced while
  backward runs, torch DDP's default), ``none`` (no data-parallel wrapper).
"""

from __future__ import annotations

from typing import Any

import torch

KEYS = ("attention", "optimizer", "ddp", "tf32", "mixed_precision", "data_path")
AFTER_BACKWARD, OVERLAP = "allreduce-after-backward", "overlap"


def tf32(device: torch.device) -> str:
    """TF32 as torch's switches say now (they are what cuBLAS and cuDNN consulted)."""
    if device.type != "cuda":
        return f"not used ({device.type})"
    matmul, cudnn = bool(torch.backends.cuda.matmul.allow_tf32), bool(torch.backends.cudnn.allow_tf32)
    if matmul == cudnn:
        return "on" if matmul else "off"
    return f"matmul {'on' if matmul else 'off'}, cudnn {'on' if cudnn else 'off'}"


def mixed_precision(autocast_dtype: torch.dtype | None, scaler: torch.amp.GradScaler | None = None) -> str:
    """The autocast dtype the forward ran under, and whether a GradScaler scaled the loss."""
    if autocast_dtype is None:
        return "fp32"
    name = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(autocast_dtype, str(autocast_dtype))
    scaled = scaler is not None and scaler.is_enabled()
    return f"{name}-autocast" + ("+dynamic-loss-scale" if scaled else "")


def optimizer_implementation(optimizer: torch.optim.Optimizer) -> str:
    """per-tensor, foreach or fused, as torch resolves each parameter group's flags when it steps
    (a flag left at None is resolved the way torch does it: foreach on CUDA tensors, else the loop).
    Groups that resolve differently read ``mixed (...)``."""
    found = []
    for group in optimizer.param_groups:
        fused, foreach = group.get("fused"), group.get("foreach")
        if not fused and foreach is None:
            fused, foreach = _torch_default(group["params"])
        found.append("fused" if fused else "foreach" if foreach else "per-tensor")
    kinds = sorted(set(found))
    return kinds[0] if len(kinds) == 1 else f"mixed ({', '.join(kinds)})"


def _torch_default(params: list[torch.Tensor]) -> tuple[bool, bool]:
    from torch.optim.optimizer import _default_to_fused_or_foreach

    fused, foreach = _default_to_fused_or_foreach(params, differentiable=False, use_fused=False)
    return bool(fused), bool(foreach)


def optimizer(optimizer: torch.optim.Optimizer) -> str:
    """``adamw-per-tensor``: the optimizer's class and how it steps."""
    return f"{type(optimizer).__name__.lower()}-{optimizer_implementation(optimizer)}"


def ddp_buckets(model: torch.nn.Module) -> int | None:
    """How many buckets DDP's reducer all-reduced in the last step (None: no DDP, or before a step)."""
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return None
    reduced = model._get_ddp_logging_data().get("num_buckets_reduced")
    return int(reduced) if reduced else None


def ddp(model: torch.nn.Module) -> str:
    """The gradient all-reduce schedule DDP ran: one bucket is reduced when the last gradient is
    ready, so after the whole backward; several buckets are reduced while backward runs."""
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return "none"
    buckets = ddp_buckets(model)
    if buckets is None:
        return "not run"
    return AFTER_BACKWARD if buckets == 1 else OVERLAP


def one_bucket_mb(module: torch.nn.Module) -> int:
    """A DDP ``bucket_cap_mb`` that holds every gradient of ``module`` in one bucket (torch uses an
    explicit cap for the first bucket too, and keeps it when it rebuilds the buckets)."""
    size = sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)
    return size // 2**20 + 1


def summary_fields(**software: Any) -> dict[str, Any]:
    """``{"software": {...}}`` for summary.json, with the keys in the host's order; unknown keys
    are refused here rather than ignored by the host."""
    unknown = sorted(set(software) - set(KEYS))
    if unknown:
        raise ValueError(f"unknown software key(s) {', '.join(unknown)}; known: {', '.join(KEYS)}")
    return {"software": {key: software[key] for key in KEYS if software.get(key) is not None}}
