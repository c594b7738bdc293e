"""`make bench`'s VOLO kernels: the publication's against today's, on one core of this machine.

The VOLO trainer's published variants run sail-sg/volo's attention (three ops) and torch <= 1.10's
per-tensor AdamW; the variants beyond the publication run SDPA and the multi-tensor or fused AdamW.
Each row times the trainer's own modules (attention.py's SelectableAttention, build_optimizer)
with both kernels, named as summary.json records them, so the table says what each kernel costs
here. A CPU is not the publication's A100: the ratios on a GPU are for `make bench-gpu` to measure
(pretrain-d5-modern-kernels, finetune-d5-512-sdpa).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

# VOLO-D1's transformer blocks: 12 heads of 32; 196, 576 and 1024 tokens at 224, 384 and 512 px.
HEADS, HEAD_DIM, BATCH = 12, 32, 2
TOKENS = (196, 576, 1024)


def _median_ms(work: Callable[[], None], repeats: int) -> float:
    work()  # warm-up: allocations, dispatch caches
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e3


def attention(tokens: int, kernel: str, repeats: int) -> tuple[str, float]:
    """(the kernel that ran, ms of one forward and backward) of one transformer block's attention."""
    from timm.models.volo import Attention

    from reprokit_trainers.volo.attention import SelectableAttention, attention_ran

    module = Attention(HEADS * HEAD_DIM, num_heads=HEADS)
    module.__class__ = SelectableAttention
    module.kernel = kernel
    side = int(tokens**0.5)
    x = torch.randn(BATCH, side, side, HEADS * HEAD_DIM, requires_grad=True)
    ms = _median_ms(lambda: module(x).sum().backward(), repeats)
    return attention_ran(module), ms


def adamw(impl: str, repeats: int) -> tuple[str, int, float]:
    """(the optimizer as recorded, tensors, ms of one step) over VOLO-D1's parameters."""
    from timm.models.volo import VOLO

    from reprokit_trainers.common.record import software
    from reprokit_trainers.volo import run_volo

    model = VOLO(img_size=224, num_classes=1000, **run_volo.ARCHITECTURES["volo_d1"])
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    optimizer = run_volo.build_optimizer(
        model, run_volo.TrainArguments(output_dir="-", optimizer_impl=impl), 1e-3
    )
    ms = _median_ms(optimizer.step, repeats)
    return software.optimizer(optimizer), sum(len(g["params"]) for g in optimizer.param_groups), ms


def measure(repeats: int = 5, tokens: tuple[int, ...] = TOKENS) -> list[dict]:
    """Rows of the table: each published kernel beside the one beyond it, and the ratio."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one core, like the data-path table: steadier on a shared machine
    try:
        rows = []
        for count in tokens:
            (published, slow), (beyond, fast) = (attention(count, k, repeats) for k in ("math", "sdpa"))
            rows.append(
                _row(
                    f"attention fwd+bwd, {count} tokens, {HEADS} heads x {HEAD_DIM}, batch {BATCH}",
                    published,
                    slow,
                    beyond,
                    fast,
                )
            )
        published, tensors, slow = adamw("per_tensor", repeats)
        for impl in ("foreach", "fused"):
            beyond, _, fast = adamw(impl, repeats)
            rows.append(_row(f"AdamW step, VOLO-D1 ({tensors} tensors)", published, slow, beyond, fast))
        return rows
    finally:
        torch.set_num_threads(threads)


def _row(name: str, published: str, published_ms: float, beyond: str, beyond_ms: float) -> dict:
    return {
        "suite": "volo-kernels",
        "name": name,
        "published": published,
        "published_ms": published_ms,
        "beyond": beyond,
        "beyond_ms": beyond_ms,
        "speedup": published_ms / beyond_ms,
    }
