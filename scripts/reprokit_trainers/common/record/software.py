"""The software a run actually used, read back from what ran: summary.json's ``software``.

A published cell is judged only if it ran its publication's kernels (the recipe's
``published_software.kernels``); the host compares this record with them key by key, as text. So
each value is read from the objects and the dispatcher that ran (the optimizer's resolved flags, the
attention kernels dispatched in a real step, the DDP reducer's buckets, torch's TF32 switches, the
autocast state where the model runs), never copied from the command line. The keys and the words of
each value are the contract's (reprokit_trainers/contract.json, ``software_keys``):

- ``attention``: ``math`` (batched matmul, softmax, batched matmul: torch 1.x's attention, and SDPA's
  unfused fallback, which runs the same kernels) or the fused kernel (``sdpa-flash``,
  ``sdpa-efficient``, ``sdpa-cudnn``, ``sdpa-fused``; ``sdpa`` where the backend cannot be read);
- ``optimizer``: ``<class>-<implementation>``: ``adamw-per-tensor`` (a loop over the tensors),
  ``adamw-foreach`` (multi-tensor kernels), ``adamw-fused``; transformers' and Habana's own classes
  say so in brackets (``adamw-per-tensor (transformers)``, ``fusedadamw-fused (habana)``);
- ``ddp``: ``none``, ``ddp-overlap`` (several buckets all-reduced while backward runs: torch DDP's
  default), ``ddp-after-backward`` (one bucket, reduced once backward is done: Apex's
  ``delay_allreduce``), ``fsdp-<sharding strategy>``, or a trainer's own (Gaudi's ``fast_ddp``);
- ``tf32``: ``on``, ``off``, ``matmul on, cudnn off`` (or the reverse), ``not used (<device>)``;
- ``mixed_precision``: ``fp32``, ``amp-fp16`` / ``amp-bf16`` (autocast over fp32 weights),
  ``pure-fp16`` / ``pure-bf16`` (the model computes in that dtype);
- ``data_path``: the trainer's own words for its loader (``published``, ``pycls``, ``dali``, ...);
- ``host_sync``: ``every-step`` (the loop waits for the device each step, as the published loops did)
  or ``logging-steps``;
- ``zero_grad``: ``zeros`` or ``set-to-none``, read from the gradients zero_grad left;
- ``input_stream``: ``side-stream``, ``inline``, or ``inline (<device>: no side stream)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from reprokit_trainers.common.record.contract import SOFTWARE_KEYS

# The fused attention kernels behind F.scaled_dot_product_attention, by the ATen op that runs them.
FUSED_ATTENTION = {
    "_scaled_dot_product_flash_attention": "sdpa-flash",
    "_scaled_dot_product_flash_attention_for_cpu": "sdpa-flash",
    "_scaled_dot_product_efficient_attention": "sdpa-efficient",
    "_scaled_dot_product_cudnn_attention": "sdpa-cudnn",
    "_scaled_dot_product_fused_attention_overrideable": "sdpa-fused",
}
DDP_OVERLAP, DDP_AFTER_BACKWARD = "ddp-overlap", "ddp-after-backward"
_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


# ---------------------------------------------------------------------------------------------
# attention: the kernels the dispatcher chose


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
    and name the attention kernels the dispatcher chose."""
    with _Dispatched() as dispatched:
        run()
    return attention_of(dispatched.names)


def attention_of(ops: set[str]) -> str:
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
        self._hooks = [
            module.register_forward_pre_hook(self._enter),
            module.register_forward_hook(self._leave),
        ]

    def _enter(self, module: torch.nn.Module, args: tuple) -> None:
        if self.mixed_precision is not None:
            return
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        parameter = next(module.parameters(), None)
        device = (first if first is not None else parameter).device.type
        self.mixed_precision = precision_here(
            device, parameter.dtype if parameter is not None else first.dtype
        )
        if self.dispatch:
            self._mode = _Dispatched()
            self._mode.__enter__()

    def _leave(self, module: torch.nn.Module, args: tuple, output: Any) -> None:
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self.attention = attention_of(self._mode.names)
            self._mode = None
        for hook in self._hooks:
            hook.remove()


# ---------------------------------------------------------------------------------------------
# optimizer, gradient reduction, TF32, precision


def _unwrapped(optimizer: Any) -> Any:
    """accelerate's and others' wrappers hold the optimizer that steps in ``.optimizer``."""
    while getattr(optimizer, "optimizer", None) is not None:
        optimizer = optimizer.optimizer
    return optimizer


# torch's rule for a foreach/fused flag left at None (torch/optim/optimizer.py, 2.x), in public terms:
# the foreach step where every parameter is a plain tensor on a device with foreach kernels.
FOREACH_DEVICES = frozenset({"cuda", "xpu", "mtia"})


def optimizer_implementation(optimizer: torch.optim.Optimizer) -> str:
    """per-tensor, foreach or fused, as torch resolves each parameter group's flags when it steps (a
    flag left at None is resolved the way torch does: foreach on CUDA tensors, else the loop). Groups
    that resolve differently read ``mixed (...)``."""
    found = []
    for group in optimizer.param_groups:
        fused, foreach = group.get("fused"), group.get("foreach")
        if not fused and foreach is None and not group.get("differentiable"):
            foreach = all(
                type(p) in (torch.Tensor, torch.nn.Parameter) and p.device.type in FOREACH_DEVICES
                for p in group["params"]
            )
        found.append("fused" if fused else "foreach" if foreach else "per-tensor")
    kinds = sorted(set(found))
    return kinds[0] if len(kinds) == 1 else f"mixed ({', '.join(kinds)})"


def optimizer(optimizer: Any) -> str:
    """``adamw-per-tensor``: the class of the optimizer that steps and how it steps."""
    inner = _unwrapped(optimizer)
    cls = type(inner)
    name = cls.__name__.lower()
    if cls.__module__.startswith("transformers"):
        # transformers' own AdamW (optim=adamw_hf): its step is a Python loop over the tensors.
        return f"{name}-per-tensor (transformers)"
    if cls.__module__.startswith("habana_frameworks"):
        return f"{name}-fused (habana)"
    return f"{name}-{optimizer_implementation(inner)}"


def ddp_buckets(model: torch.nn.Module) -> int | None:
    """How many buckets DDP's reducer all-reduced in the last step (None: no DDP, or before a step)."""
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return None
    reduced = model._get_ddp_logging_data().get("num_buckets_reduced")
    return int(reduced) if reduced else None


def ddp(model: Any) -> str:
    """How the wrapped model reduced gradients: DDP in one bucket once backward is done, or in several
    while it runs; FSDP with its sharding strategy as it ran (one process: no_shard); or none."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    model = getattr(model, "_orig_mod", model)  # torch.compile's wrapper
    if isinstance(model, FullyShardedDataParallel):
        return f"fsdp-{model.sharding_strategy.name.lower()}"
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return "none"
    buckets = ddp_buckets(model)
    if buckets is None:
        return "ddp (no step reduced)"
    return DDP_AFTER_BACKWARD if buckets == 1 else DDP_OVERLAP


def one_bucket_mb(module: torch.nn.Module) -> int:
    """A DDP ``bucket_cap_mb`` that holds every gradient of ``module`` in one bucket (torch uses an
    explicit cap for the first bucket too, and keeps it when it rebuilds the buckets)."""
    size = sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)
    return size // 2**20 + 1


EVERY_STEP, LOGGING_STEPS = "every-step", "logging-steps"  # host_sync's words


def zero_grad_left(parameters: Any) -> str | None:
    """What a ``zero_grad`` just left in ``parameters`` (an iterable) after a step that made gradients:
    ``zeros`` (filled, torch 1.x's default) or ``set-to-none`` (freed, torch 2's); None before any."""
    grads = [p.grad for p in parameters if p.requires_grad]
    if not grads:
        return None
    # Zero-filling keeps the gradient tensors that exist (a parameter no step reached has none).
    return "zeros" if any(g is not None for g in grads) else "set-to-none"


def tf32(device_type: str) -> str:
    """TF32 as torch's switches say now (what cuBLAS and cuDNN consult); a device without TF32 says so."""
    if device_type != "cuda":
        return f"not used ({device_type})"
    matmul, cudnn = bool(torch.backends.cuda.matmul.allow_tf32), bool(torch.backends.cudnn.allow_tf32)
    if matmul == cudnn:
        return "on" if matmul else "off"
    return f"matmul {'on' if matmul else 'off'}, cudnn {'on' if cudnn else 'off'}"


def mixed_precision(autocast: torch.dtype | None, compute: torch.dtype = torch.float32) -> str:
    """``amp-fp16`` when the forward runs under autocast to fp16 over weights of another dtype; else
    the dtype the model computes in (``fp32``, ``pure-fp16``, ``pure-bf16``)."""
    if autocast is not None:
        return f"amp-{_DTYPES.get(autocast, str(autocast))}"
    name = _DTYPES.get(compute, str(compute))
    return name if name == "fp32" else f"pure-{name}"


def precision_here(device_type: str, compute: torch.dtype) -> str:
    """mixed_precision() read where the model runs: autocast's state at this point of the forward."""
    autocast = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None
    return mixed_precision(autocast, compute)


def summary_fields(**software: Any) -> dict[str, Any]:
    """``{"software": {...}}`` for summary.json, in the contract's key order; an unknown key is refused
    here rather than ignored by the host."""
    unknown = sorted(set(software) - set(SOFTWARE_KEYS))
    if unknown:
        raise ValueError(f"unknown software key(s) {', '.join(unknown)}; known: {', '.join(SOFTWARE_KEYS)}")
    return {"software": {key: software[key] for key in SOFTWARE_KEYS if software.get(key) is not None}}
