"""The fixed inputs of the conformance suites, made the same way by the golden scripts (with the
upstream code) and by the tests (with the kit's): parameters set by a rule from their names, images
from a seeded generator, small JPEGs."""

from __future__ import annotations

import zlib

import torch


def canonical(name: str) -> str:
    """One name for a parameter upstream and in the kit (pycls wraps nn.MultiheadAttention as
    ``block``, the kit as ``attn``)."""
    return name.replace(".self_attention.attn.", ".self_attention.block.")


@torch.no_grad()
def deterministic_(named: dict[str, torch.Tensor], scale: float = 0.2) -> None:
    """Every parameter from a generator seeded by its canonical name, in its own element order (a
    (L, 1, E) and a (1, L, E) position embedding get the same values)."""
    for name, param in named.items():
        generator = torch.Generator().manual_seed(zlib.crc32(canonical(name).encode()))
        param.copy_((torch.randn(param.numel(), generator=generator) * scale).view_as(param))


def images(size: int, count: int = 3) -> torch.Tensor:
    return torch.randn(count, 3, size, size, generator=torch.Generator().manual_seed(1))


def jpegs() -> list[bytes]:
    """Two small JPEGs (a landscape and a portrait, OpenCV's encoder): the golden scripts embed the
    bytes in their fixtures, and the tests read them from there."""
    import cv2
    import numpy as np

    rng = np.random.default_rng(7)
    out = []
    for height, width in ((48, 64), (70, 50)):
        y, x = np.mgrid[0:height, 0:width]
        pixels = np.stack([x * 255 // width, y * 255 // height, (x + y) * 255 // (width + height)], axis=-1)
        pixels = np.clip(pixels + rng.integers(-20, 20, pixels.shape), 0, 255).astype(np.uint8)
        ok, data = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, 90])
        assert ok
        out.append(data.tobytes())
    return out
