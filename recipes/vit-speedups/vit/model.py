"""pycls's Vision Transformer, with the switches of Meta's ViT speedup ladder (recipes/vit-speedups/SOURCES.md §1, §2).

The architecture follows facebookresearch/pycls ``pycls/models/vit.py`` (patchify stem):

- stem: one ``k x k`` convolution with stride ``k`` (the patch size) and a bias;
- tokens: the stem's ``h x w`` grid flattened, an optional class token in front, plus a learned
  position embedding;
- encoder: pre-LayerNorm blocks, ``x + attention(ln_1(x))`` then ``x + mlp(ln_2(x))`` with a
  fc-GELU-fc MLP, and a final LayerNorm;
- head: one fc layer on the class token (``token``) or on the mean of all tokens (``pooled``).

pycls's initialization is kept: truncated normal (std sqrt(1/fan_in)) for the patchify conv, Xavier
uniform weights and N(0, 1e-6) biases in the MLP, a zero-initialized head and class token, position
embedding N(0, 0.02), LayerNorm eps 1e-6 (``LN.EPS`` in pycls's ViT configs).

The ladder's switches:

- ``classifier``: ``token`` has a class-token parameter and one more token; ``pooled`` has neither
  and averages the tokens, as pycls's ``VIT.CLASSIFIER_TYPE``;
- ``layout``: ``batch_first`` runs the encoder on ``(N, L, E)`` tensors, which
  ``nn.MultiheadAttention(batch_first=True)`` transposes to ``(L, N, E)`` and back inside every call;
  ``batch_second`` keeps ``(L, N, E)`` throughout and uses ``batch_first=False``, so no attention
  call transposes (pycls's commit claims ~4% training speed);
- ``attention``: ``math`` is the attention pycls ran in 2022: ``nn.MultiheadAttention`` on torch 1.x
  computed batched matmul, softmax, batched matmul whatever ``need_weights`` said; torch 2.x sends
  ``need_weights=False`` (pycls's call) to the fused ``F.scaled_dot_product_attention`` instead, and
  keeps the unfused steps only for ``need_weights=True``, which ``math`` asks for (per head, not
  averaged: no extra op). Beyond the publication: ``mha`` is today's ``nn.MultiheadAttention(
  need_weights=False)`` (fused SDPA inside the module), ``sdpa`` calls
  ``F.scaled_dot_product_attention`` directly on the same parameters.

The parameters and their names are the same for every switch value except the class token, so a
state dict moves between layouts and attention implementations unchanged.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from reprokit_trainers.common.process.args import check_sizes

CLASSIFIERS = ("token", "pooled")
LAYOUTS = ("batch_first", "batch_second")
ATTENTIONS = ("math", "mha", "sdpa")

# pycls names its ViT sizes by hidden dim, depth and heads; B/16 and L/16 are the ViT paper's.
# "tiny" is the kit's smoke-test size: the same code at a size a CPU trains in milliseconds.
SIZES: dict[str, dict[str, int]] = {
    "tiny": {"patch_size": 16, "n_layers": 2, "n_heads": 2, "hidden_d": 32, "mlp_d": 64},
    "b16": {"patch_size": 16, "n_layers": 12, "n_heads": 12, "hidden_d": 768, "mlp_d": 3072},
    "l16": {"patch_size": 16, "n_layers": 24, "n_heads": 16, "hidden_d": 1024, "mlp_d": 4096},
}


@dataclass(frozen=True)
class ViTConfig:
    image_size: int = 224
    patch_size: int = 16
    n_layers: int = 12
    n_heads: int = 12
    hidden_d: int = 768
    mlp_d: int = 3072
    num_classes: int = 1000
    classifier: str = "token"
    layout: str = "batch_first"
    attention: str = "math"
    ln_eps: float = 1e-6

    def __post_init__(self) -> None:
        check_sizes(
            self, ("image_size", "patch_size", "n_layers", "n_heads", "hidden_d", "mlp_d", "num_classes")
        )
        choices = {"classifier": CLASSIFIERS, "layout": LAYOUTS, "attention": ATTENTIONS}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} {getattr(self, name)!r}: choose one of {', '.join(allowed)}")
        if self.image_size % self.patch_size:
            raise ValueError(
                f"image size {self.image_size} is not a multiple of the patch size {self.patch_size}"
            )
        if self.hidden_d % self.n_heads:
            raise ValueError(f"hidden_d {self.hidden_d} is not divisible by n_heads {self.n_heads}")

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def seq_len(self) -> int:
        return self.num_patches + (1 if self.classifier == "token" else 0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def vit_config(size: str, overrides: dict[str, Any] | None = None, **switches: Any) -> ViTConfig:
    """A named size (tiny, b16, l16) with architecture overrides and the ladder's switches."""
    if size not in SIZES:
        raise ValueError(f"model size {size!r}: choose one of {', '.join(SIZES)}")
    known = set(ViTConfig.__dataclass_fields__)
    unknown = sorted(set(overrides or {}) - known)
    if unknown:
        raise ValueError(f"unknown ViT architecture keys {unknown}; known: {sorted(known)}")
    return replace(ViTConfig(**SIZES[size]), **(overrides or {}), **switches)


class SelfAttention(nn.Module):
    """Multi-head self-attention on (N, L, E) or (L, N, E) tensors: unfused (``math``), or fused SDPA
    through ``nn.MultiheadAttention`` (``mha``) or called directly (``sdpa``).

    All use the parameters of one ``nn.MultiheadAttention`` (packed q/k/v input projection and
    ``out_proj``), so they compute the same function with the same weights.
    """

    def __init__(self, hidden_d: int, n_heads: int, batch_first: bool, attention: str) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(hidden_d, n_heads, batch_first=batch_first)
        self.batch_first = batch_first
        self.n_heads = n_heads
        self.attention = attention

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.attention == "math":
            # The weights are asked for only to keep torch on its unfused path (torch 1.x's kernels).
            return self.attn(x, x, x, need_weights=True, average_attn_weights=False)[0]
        if self.attention == "mha":
            return self.attn(x, x, x, need_weights=False)[0]
        # (N, L, 3E) or (L, N, 3E) -> q, k, v as (N, H, L, D), the layout SDPA's kernels take.
        qkv = F.linear(x, self.attn.in_proj_weight, self.attn.in_proj_bias)
        if self.batch_first:
            n, length, e = x.shape
            q, k, v = qkv.view(n, length, 3, self.n_heads, e // self.n_heads).permute(2, 0, 3, 1, 4)
        else:
            length, n, e = x.shape
            q, k, v = qkv.view(length, n, 3, self.n_heads, e // self.n_heads).permute(2, 1, 3, 0, 4)
        out = F.scaled_dot_product_attention(q, k, v)
        if self.batch_first:
            out = out.transpose(1, 2).reshape(n, length, e)
        else:
            out = out.permute(2, 0, 1, 3).reshape(length, n, e)
        return self.attn.out_proj(out)


class MLPBlock(nn.Module):
    """fc, GELU, fc."""

    def __init__(self, hidden_d: int, mlp_d: int) -> None:
        super().__init__()
        self.linear_1 = nn.Linear(hidden_d, mlp_d)
        self.af = nn.GELU()
        self.linear_2 = nn.Linear(mlp_d, hidden_d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(self.af(self.linear_1(x)))


class ViTEncoderBlock(nn.Module):
    """Pre-LN transformer block (https://arxiv.org/abs/2010.11929)."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.hidden_d, eps=config.ln_eps)
        self.self_attention = SelfAttention(
            config.hidden_d, config.n_heads, config.layout == "batch_first", config.attention
        )
        self.ln_2 = nn.LayerNorm(config.hidden_d, eps=config.ln_eps)
        self.mlp_block = MLPBlock(config.hidden_d, config.mlp_d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attention(self.ln_1(x))
        return x + self.mlp_block(self.ln_2(x))


class ViTEncoder(nn.Module):
    """``n_layers`` blocks (``block_0`` ...) and a final LayerNorm, named as in pycls."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        for i in range(config.n_layers):
            self.add_module(f"block_{i}", ViTEncoderBlock(config))
        self.ln = nn.LayerNorm(config.hidden_d, eps=config.ln_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.children():
            x = layer(x)
        return x


class ViTStemPatchify(nn.Module):
    def __init__(self, hidden_d: int, patch_size: int) -> None:
        super().__init__()
        self.patchify = nn.Conv2d(3, hidden_d, patch_size, stride=patch_size, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.patchify(x)


class ViTHead(nn.Module):
    def __init__(self, hidden_d: int, num_classes: int) -> None:
        super().__init__()
        self.head_fc = nn.Linear(hidden_d, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head_fc(x)


class ViT(nn.Module):
    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.config = config
        self.batch_first = config.layout == "batch_first"
        self.stem = ViTStemPatchify(config.hidden_d, config.patch_size)
        # pycls: the pooled classifier has no class token at all (not an unused one).
        if config.classifier == "token":
            self.class_token: nn.Parameter | None = nn.Parameter(torch.zeros(1, 1, config.hidden_d))
        else:
            self.register_parameter("class_token", None)
        # Stored (1, L, E) in both layouts so that state dicts are interchangeable; batch-second
        # adds its (L, 1, E) transposed view, which broadcasts without a copy.
        self.pos_embedding = nn.Parameter(torch.zeros(1, config.seq_len, config.hidden_d))
        self.encoder = ViTEncoder(config)
        self.head = ViTHead(config.hidden_d, config.num_classes)
        init_weights_vit(self)

    @property
    def seq_dim(self) -> int:
        """The sequence dimension of the encoder's activations: 1 batch-first, 0 batch-second."""
        return 1 if self.batch_first else 0

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """Images (N, 3, H, W) -> tokens (N, L, E) batch-first or (L, N, E) batch-second."""
        x = self.stem(images).flatten(2)  # (N, E, h * w)
        if self.batch_first:
            x = x.transpose(1, 2)  # (N, L, E)
            pos = self.pos_embedding
        else:
            x = x.permute(2, 0, 1)  # (L, N, E)
            pos = self.pos_embedding.transpose(0, 1)
        if self.class_token is not None:
            n = x.size(1 - self.seq_dim)
            token = (
                self.class_token.expand(n, -1, -1) if self.batch_first else self.class_token.expand(-1, n, -1)
            )
            x = torch.cat([token, x], dim=self.seq_dim)
        return x + pos

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.encoder(self.embed(images))
        # token: the class token's output; pooled: the mean over the tokens (pycls's two classifiers).
        features = x.select(self.seq_dim, 0) if self.class_token is not None else x.mean(dim=self.seq_dim)
        return self.head(features)


def init_weights_vit(model: ViT) -> None:
    """pycls's ViT initialization (nn.MultiheadAttention keeps its own: Xavier q/k/v, zero biases)."""
    for name, module in model.named_modules():
        if isinstance(module, nn.Conv2d) and "patchify" in name:
            fan_in = module.in_channels * module.kernel_size[0] * module.kernel_size[1]
            nn.init.trunc_normal_(module.weight, std=math.sqrt(1.0 / fan_in))
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Linear) and "mlp_block" in name:
            nn.init.xavier_uniform_(module.weight)
            nn.init.normal_(module.bias, std=1e-6)
        elif isinstance(module, nn.Linear) and "head_fc" in name:
            nn.init.zeros_(module.weight)
            nn.init.zeros_(module.bias)
    nn.init.normal_(model.pos_embedding, mean=0.0, std=0.02)


def build_vit(size: str, overrides: dict[str, Any] | None = None, **switches: Any) -> ViT:
    return ViT(vit_config(size, overrides, **switches))
