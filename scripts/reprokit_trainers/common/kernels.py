"""The kernels a run used, read back from the objects and the dispatcher that ran them.

summary.json's ``software`` block (the host's recipes.SOFTWARE_KEYS) says, for each choice that shows
in throughput or in what is compared, what the run actually did: the attention kernels the dispatcher
picked, the optimizer's implementation, how gradients were reduced, TF32 as torch reads it, the mixed
precision mode and the data path. A published cell is judged only if these equal its publication's;
so each value here is read from what ran, never copied from the arguments that asked for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# The fused attention kernels behind F.scaled_dot_product_attention, by the ATen op that runs them.
FUSED_ATTENTION = {
    "_scaled_dot_product_flash_attention": "sdpa-flash",
    "_scaled_dot_product_flash_attention_for_cpu": "sdpa-flash",
    "_scaled_dot_product_efficient_attention": "sdpa-efficient",
    "_scaled_dot_product_cudnn_attention": "sdpa-cudnn",
    "_scaled_dot_product_fused_attention_overrideable": "sdpa-fused",
}


class _Dispatched(TorchDispatchMode):
    """The ATen ops that reached the kernels (to see which attention kernels ran)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.names.add(func._overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def attention_kernel(run: Callable[[], Any]) -> str:
    """Run ``run`` (a forward and backward of an attention module, as the training step calls it)
    and name the attention kernels the dispatcher chose: ``math`` (batched matmul, softmax, batched
    matmul: torch 1.x's nn.MultiheadAttention, and SDPA's own unfused fallback, which runs the same
    kernels) or the fused kernel (``sdpa-flash``, ``sdpa-efficient``, ``sdpa-cudnn``, ``sdpa-fused``)."""
    with _Dispatched() as dispatched:
        run()
    return _attention_of(dispatched.names)


def _attention_of(ops: set[str]) -> str:
    for op, name in FUSED_ATTENTION.items():
        if op in ops:
            return name
    # SDPA's unfused fallback calls _safe_softmax in today's torch, _softmax in older ones.
    if ops & {"_softmax", "_safe_softmax"} and ops & {"bmm", "baddbmm"}:
        return "math"
    return "unknown"


class FirstCallWatch:
    """Watches the first forward of a module inside the run itself (a Trainer's loop, where no probe
    can stand in for its autocast and device): the attention kernels it dispatched and the mixed
    precision it ran under. Removes its hooks after that call. ``dispatch=False`` reads the precision
    only (where ops do not reach a dispatch mode as they run: HPU lazy mode)."""

    def __init__(self, module: torch.nn.Module, dispatch: bool = True) -> None:
        self.attention: str | None = None
        self.mixed_precision: str | None = None
        self.dispatch = dispatch
        self._mode: _Dispatched | None = None
        self._hooks = [module.register_forward_pre_hook(self._enter), module.register_forward_hook(self._leave)]

    def _enter(self, module: torch.nn.Module, args: tuple) -> None:
        if self.mixed_precision is not None:
            return
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        parameter = next(module.parameters(), None)
        device = (first if first is not None else parameter).device.type
        self.mixed_precision = mixed_precision(device, parameter.dtype if parameter is not None else first.dtype)
        if self.dispatch:
            self._mode = _Dispatched()
            self._mode.__enter__()

    def _leave(self, module: torch.nn.Module, args: tuple, output: Any) -> None:
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self.attention = _attention_of(self._mode.names)
            self._mode = None
        for hook in self._hooks:
            hook.remove()


def _unwrapped(optimizer: Any) -> Any:
    """accelerate's and others' wrappers hold the optimizer that steps in ``.optimizer``."""
    while getattr(optimizer, "optimizer", None) is not None:  # accelerate's is an Optimizer subclass
        optimizer = optimizer.optimizer
    return optimizer


def optimizer_kernel(optimizer: Any) -> str:
    """``<optimizer> <implementation>``: per-tensor (a Python loop over the tensors), foreach
    (torch._foreach_* multi-tensor kernels) or fused; for torch's optimizers left to choose
    (foreach=None), the choice torch makes at the step for these parameters."""
    inner = _unwrapped(optimizer)
    cls = type(inner)
    name = cls.__name__.lower()
    if cls.__module__.startswith("transformers"):
        # transformers' own AdamW (optim=adamw_hf): its step is a Python loop over the tensors.
        return f"{name} per-tensor (transformers)"
    if cls.__module__.startswith("habana_frameworks"):
        return f"{name} fused (habana)"
    group = inner.param_groups[0]
    if group.get("fused"):
        return f"{name} fused"
    foreach = group.get("foreach")
    if foreach is None:
        from torch.optim.optimizer import _default_to_fused_or_foreach

        params = [p for g in inner.param_groups for p in g["params"]]
        _, foreach = _default_to_fused_or_foreach(params, differentiable=False, use_fused=False)
    return f"{name} {'foreach' if foreach else 'per-tensor'}"


def tf32_in_effect() -> str:
    """TF32 for float32 matmuls and convolutions as torch reads it now: on, off, or which of the two."""
    matmul, cudnn = bool(torch.backends.cuda.matmul.allow_tf32), bool(torch.backends.cudnn.allow_tf32)
    if matmul == cudnn:
        return "on" if matmul else "off"
    return "matmul only" if matmul else "cudnn only"


def gradient_reduction(model: Any) -> str:
    """How the wrapped model reduces gradients: DDP's bucketed all-reduce overlapped with backward,
    FSDP with its sharding strategy as it runs (one process: no_shard), or none."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    model = getattr(model, "_orig_mod", model)  # torch.compile's wrapper
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return "ddp overlap"
    if isinstance(model, FullyShardedDataParallel):
        return f"fsdp {model.sharding_strategy.name.lower()}"
    return "none"


def mixed_precision(device_type: str, input_dtype: torch.dtype) -> str:
    """Called where the model runs: ``amp-fp16``/``amp-bf16`` (autocast over fp32 weights) when
    autocast is on here, else the dtype the model computes in (``fp32``, ``pure-fp16``, ``pure-bf16``)."""
    names = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
    if torch.is_autocast_enabled(device_type):
        return f"amp-{names.get(torch.get_autocast_dtype(device_type), 'other')}"
    name = names.get(input_dtype, str(input_dtype))
    return name if name == "fp32" else f"pure-{name}"
