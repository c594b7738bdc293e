"""A device that holds no memory and counts what it would hold: the rehearsal's stand-in for the GPU.

Tensors made under ``FakeDevice`` are torch's fake tensors (shapes, dtypes and strides, no data), so
a published model at its published batch and resolution builds and steps in seconds on a CPU with
little memory. Every storage an op creates is counted while it lives (a weak reference per storage
says when it dies), so the peak of the bytes alive at once is the peak a real device's allocator
would have handed out for the same ops: parameters, gradients, optimizer states, the activations
saved for backward and the temporaries of each op.

What it cannot count is said where the estimate is made (``estimate``): a CUDA context and the
libraries' workspaces (a fixed allowance), the caching allocator's fragmentation, and memory outside
torch's allocator (nvJPEG's, DALI's, NCCL's buffers). Autocast runs as the CPU's autocast, with
CUDA's float32 list laid over it (``cuda_autocast_lists``): the CPU's keeps softmax, layer norm and
their kind in half precision, CUDA's runs them in float32, and attention's softmax output is often a
step's largest saved activation (the first H100 measured 20-36% more than the rehearsal counted
without it, on VOLO-D5 and the ViT's amp cells).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._pytree import tree_map

GIB = 2**30
# What the rehearsal holds a cell against: an 80 GB device's memory as its driver reports it (an H100
# 80GB HBM3: 81,559 MiB total in nvidia-smi, 79.6 GiB; its "80 GB" are binary).
DEVICE_BYTES = 81_559 * 2**20
# Beside the allocator's peak: the CUDA context, cuBLAS/cuDNN workspaces and NCCL's buffers, about
# 0.5-1.5 GiB on an H100 with torch 2.x; the larger figure is held.
ALLOWANCE_BYTES = int(1.5 * GIB)
# A cell above this share of the device is said to be tight: fragmentation alone can take the rest.
TIGHT = 0.90


class LiveBytes:
    """The bytes of the storages alive now (``current``) and at most (``peak``), over every tensor
    handed to ``track``. A storage is counted once however many views it has."""

    def __init__(self) -> None:
        self.sizes: dict[int, int] = {}
        self.refs: dict[int, weakref.ref] = {}
        self.current = 0
        self.peak = 0

    def _freed(self, key: int) -> None:
        self.current -= self.sizes.pop(key, 0)
        self.refs.pop(key, None)

    def track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        key = storage._cdata
        size = storage.nbytes()
        known = self.sizes.get(key)
        if known is None:
            self.refs[key] = weakref.ref(storage, lambda _ref, key=key: self._freed(key))
            self.sizes[key] = size
            self.current += size
        elif known != size:  # resized in place
            self.sizes[key] = size
            self.current += size - known
        if self.current > self.peak:
            self.peak = self.current

    def track_outputs(self, out: Any) -> None:
        """An op's outputs: a tensor, or tuples and lists of them (what an aten op returns)."""
        if isinstance(out, torch.Tensor):
            self.track(out)
        elif isinstance(out, (tuple, list)):
            for value in out:
                self.track_outputs(value)


class CountingFakeTensorMode(FakeTensorMode):
    """Torch's fake tensor mode, each op's outputs counted in ``live`` as the op returns. Counted
    here rather than by a dispatch mode of its own above the fake one: a second mode costs each op a
    second pass through the dispatcher and Python (about a sixth of a rehearsal's CPU time). Only an
    op's outermost dispatch is counted, as a mode above would see it: the ops of a decomposition the
    fake mode runs inside (``depth`` > 1) make temporaries torch's own kernel would not."""

    def __init__(self, live: LiveBytes) -> None:
        # Real tensors met inside (a constant, a loader's batch not yet put) become fake ones.
        super().__init__(allow_non_fake_inputs=True)
        self.live = live
        self.depth = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.depth += 1
        try:
            out = super().__torch_dispatch__(func, types, args, kwargs)
        finally:
            self.depth -= 1
        if self.depth == 0:
            self.live.track_outputs(out)
        return out


def _stay_put(original: Any) -> Any:
    """Module.to for models of fake tensors: no move (they are on the fake device already), and a
    dtype change made by replacing the parameters (fake parameters cannot be swapped in place)."""

    def to(self: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.nn.Module:
        params = list(self.parameters())
        if not params or not all(isinstance(p, FakeTensor) for p in params):
            return original(self, *args, **kwargs)
        _, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        if dtype is not None:
            for module in self.modules():
                for name, param in module._parameters.items():
                    if param is not None and param.is_floating_point() and param.dtype != dtype:
                        module._parameters[name] = torch.nn.Parameter(
                            param.detach().to(dtype), requires_grad=param.requires_grad
                        )
                for name, buffer in module._buffers.items():
                    if buffer is not None and buffer.is_floating_point() and buffer.dtype != dtype:
                        module._buffers[name] = buffer.to(dtype)
        return self

    return to


def _values_unread(original: Any) -> Any:
    """torch's truncated normal init redraws until no value is out of bounds, which reads values a
    fake tensor does not have: fake tensors are left as they are, as torch leaves meta tensors."""

    def trunc_normal(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return tensor if isinstance(tensor, FakeTensor) else original(tensor, *args, **kwargs)

    return trunc_normal


# CUDA autocast's "ops that can autocast to float32" (torch's AMP documentation): each runs on its
# inputs cast to float32 and returns float32, where the CPU's autocast leaves most of them in half.
CUDA_AUTOCAST_FP32 = frozenset(
    """
    __pow__ __rdiv__ __rpow__ __rtruediv__ acos asin binary_cross_entropy_with_logits cosh
    cosine_embedding_loss cdist cosine_similarity cross_entropy cumprod cumsum dist erfinv exp expm1
    group_norm hinge_embedding_loss kl_div l1_loss layer_norm log log_softmax log10 log1p log2
    margin_ranking_loss mse_loss multilabel_margin_loss multi_margin_loss nll_loss norm normalize pdist
    poisson_nll_loss pow prod reciprocal rsqrt sinh smooth_l1_loss soft_margin_loss softmax softmin
    softplus sum renorm tan triplet_margin_loss
    """.split()
)
HALF = (torch.float16, torch.bfloat16)


def _as_cuda_autocasts(original: Any) -> Any:
    """``original`` run as CUDA's autocast runs an op of its float32 list: on its half-precision
    inputs cast to float32, while the CPU's autocast is on (elsewhere it is ``original``)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        if torch.is_autocast_enabled("cpu"):
            args, kwargs = tree_map(_to_float32, (args, kwargs))
        return original(*args, **kwargs)

    return run


def _to_float32(value: Any) -> Any:
    return value.float() if isinstance(value, torch.Tensor) and value.dtype in HALF else value


@contextmanager
def cuda_autocast_lists() -> Iterator[None]:
    """CUDA's float32 list laid over the CPU's autocast, where Python code calls it (torch.X,
    torch.nn.functional.X, Tensor.X): patched rather than a TorchFunctionMode, whose handler would
    hide the calls inside a composite such as multi_head_attention_forward's softmax."""
    patched = []
    for owner in (torch, torch.nn.functional, torch.Tensor):
        for name in CUDA_AUTOCAST_FP32:
            # Tensor's methods live on its C base: the patch shadows them, and its removal unshadows.
            original = getattr(owner, name, None)
            if callable(original):
                patched.append((owner, name, owner.__dict__.get(name)))
                setattr(owner, name, _as_cuda_autocasts(original))
    try:
        yield
    finally:
        for owner, name, own in patched:
            if own is None:
                delattr(owner, name)
            else:
                setattr(owner, name, own)


@dataclass
class FakeDevice:
    """The fake tensors' mode and the count of their bytes; enter it (``with device.on():``) around
    everything that would run on the GPU, and hand it real tensors from the loader with ``put``."""

    live: LiveBytes = field(default_factory=LiveBytes)
    mode: CountingFakeTensorMode = field(init=False)

    def __post_init__(self) -> None:
        self.mode = CountingFakeTensorMode(self.live)

    @contextmanager
    def on(self) -> Iterator[None]:
        original_to, original_trunc = torch.nn.Module.to, torch.nn.init._no_grad_trunc_normal_
        torch.nn.Module.to = _stay_put(original_to)  # type: ignore[method-assign]
        torch.nn.init._no_grad_trunc_normal_ = _values_unread(original_trunc)
        try:
            # A torch.compile'd model (accelerate's, for --torch_compile) runs eager here: dynamo would
            # trace it on fake tensors (minutes, and inductor's memory is not the count's). A dispatch
            # mode of the rehearsal's own made dynamo skip it until the count moved into the fake mode.
            with self.mode, cuda_autocast_lists(), torch._dynamo.config.patch(disable=True):
                yield
        finally:
            torch.nn.Module.to = original_to  # type: ignore[method-assign]
            torch.nn.init._no_grad_trunc_normal_ = original_trunc

    def put(self, value: Any) -> Any:
        """Real tensors (a batch, its targets) onto the fake device, counted (what `.to(device)` does)."""

        def move(item: Any) -> Any:
            if not isinstance(item, torch.Tensor) or isinstance(item, FakeTensor):
                return item
            fake = self.mode.from_tensor(item)
            self.live.track(fake)
            return fake

        return tree_map(move, value)


def trainable_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def estimate(peak: int, extra: dict[str, int]) -> dict[str, Any]:
    """The cell's device-memory estimate: the counted peak, what the wrappers hold beside it
    (``extra``: DDP's gradient buckets, FSDP's low-precision copies), the fixed allowance; held
    against the device."""
    total = peak + sum(extra.values()) + ALLOWANCE_BYTES
    return {
        "peak_counted_bytes": peak,
        "extra_bytes": extra,
        "allowance_bytes": ALLOWANCE_BYTES,
        "estimate_bytes": total,
        "device_bytes": DEVICE_BYTES,
        "share": total / DEVICE_BYTES,
        "fits": total <= DEVICE_BYTES,
        "tight": total > TIGHT * DEVICE_BYTES,
    }
