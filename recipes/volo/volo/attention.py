"""Which kernel the self-attention of VOLO's transformer blocks runs, and which one it did run.

sail-sg/volo, the publication's code, computes attention as three ops: the scores ``q @ k^T``,
scaled, a softmax and the weighted sum ``@ v``; the [tokens x tokens] score matrix is written to
memory and read back (576 tokens per head at 384 px, 1024 at 512). timm 1.0.15's VOLO calls
``F.scaled_dot_product_attention`` instead, a fused kernel that never stores the scores. The kit's
published variants run the publication's three ops (``math``); ``sdpa`` is the variant beyond the
publication. Each module notes the kernel its last forward took (``ran``), and ``ran`` over the
model is what summary.json records: what was dispatched, not what was asked.

Only the transformer blocks change: the outlookers and the two class-attention blocks run the
same ops in sail-sg/volo and in timm (the class token is a single query).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ATTENTION = ("math", "sdpa")
# torch.nn.attention.SDPBackend's values, as torch._fused_sdp_choice returns them.
SDPA_BACKENDS = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn"}


def _timm_attention() -> type[nn.Module]:
    from timm.models.volo import Attention

    return Attention


class SelectableAttention(_timm_attention()):
    """timm's VOLO ``Attention`` (same parameters, same state_dict) with the kernel chosen by
    ``kernel``: ``math`` in sail-sg/volo's order (scores scaled after ``q @ k^T``), or ``sdpa``."""

    kernel: str = "math"
    ran: str | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, height, width, channels = x.shape
        qkv = self.qkv(x).reshape(batch, height * width, 3, self.num_heads, channels // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each [B, heads, tokens, head_dim]
        if self.kernel == "sdpa":
            dropout = self.attn_drop.p if self.training else 0.0
            if self.ran is None:
                self.ran = sdpa_backend(q, k, v, dropout)
            x = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout)
        else:
            scores = (q @ k.transpose(-2, -1)) * self.scale
            x = self.attn_drop(scores.softmax(dim=-1)) @ v
            self.ran = "math"
        x = x.transpose(1, 2).reshape(batch, height, width, channels)
        return self.proj_drop(self.proj(x))


def sdpa_backend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout: float) -> str:
    """``sdpa-flash``, ``sdpa-efficient``, ...: the backend torch picks for these inputs (torch's
    own chooser; ``sdpa`` alone where this torch does not expose it)."""
    choose = getattr(torch, "_fused_sdp_choice", None)
    if choose is None:
        return "sdpa"
    try:
        index = int(choose(q, k, v, None, dropout, False))
    except (RuntimeError, TypeError):
        return "sdpa"
    return f"sdpa-{SDPA_BACKENDS.get(index, index)}"


def use_attention(model: nn.Module, kernel: str) -> int:
    """Make every transformer-block attention of a timm VOLO run ``kernel``; returns how many."""
    if kernel not in ATTENTION:
        raise ValueError(f"--attention {kernel}: choose one of {', '.join(ATTENTION)}")
    base = _timm_attention()
    count = 0
    for module in model.modules():
        if isinstance(module, base):
            module.__class__ = SelectableAttention  # same parameters and buffers: only forward changes
            module.kernel = kernel
            module.ran = None
            count += 1
    return count


def attention_ran(model: nn.Module) -> str:
    """The kernel the attention modules took in their last forward: one word if they agree."""
    ran = sorted({m.ran or "not run" for m in model.modules() if isinstance(m, SelectableAttention)})
    if not ran:
        return "none"
    return ran[0] if len(ran) == 1 else f"mixed ({', '.join(ran)})"
