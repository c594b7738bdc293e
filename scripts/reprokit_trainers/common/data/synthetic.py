"""Synthetic stand-ins for datasets that cannot be downloaded here.

Throughput is what is measured, so the stand-ins must cost what the real data costs: real
JPEG bytes of the real images' sizes (decode and resize dominate data loading), with enough
texture that the encoder cannot shrink them to nothing, and captions of the real lengths.
Everything is derived from a seed, so two runs see the same bytes.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
from PIL import Image

# The New Yorker caption-contest cartoons (jmhessel/newyorker_caption_contest, BridgeTower's data),
# the one place the kit states their sizes: the BridgeTower trainer's synthetic defaults and
# `make bench` (benchmarks/run.py) read these, and the recipe sets no sizes of its own.
# Widths: 800-1,680 px, the range the Hugging Face dataset viewer reports for a public derived set
# of the same cartoons (newyccku/nycc-thinking, "imagewidth (px) 800 - 1.68k"; no such range was
# found for jmhessel's own viewer).
CARTOON_WIDTHS = (800, 1680)
# Heights: an ASSUMPTION, not a measurement (no source found gives them): the width range over
# 5:4, a typical aspect of single-panel cartoons; drawn independently of the width, so the
# aspects span about 0.6 to 2.6 around 1.25.
CARTOON_HEIGHTS = (640, 1344)
# Bytes: the `matching` train split's parquet shards hold 548 MB for 9,792 rows (273 + 275 MB at
# revision d81cbab), about 56.0 KB a row, text included. At quality 30, ``cartoon_jpeg_bytes`` of
# these sizes average 55.5 KB (the trainer's 512 train stand-ins of seed 0: 27-92 KB), within 1% of
# it; libjpeg's usual 75 would give 81 KB. The quality is what is tuned to the real bytes, not the
# drawing: how the real files were encoded is not known.
CARTOON_JPEG_QUALITY = 30


def jpeg_bytes(width: int, height: int, rng: np.random.Generator, quality: int = 90) -> bytes:
    """A photo-like JPEG: smooth gradients plus mid-frequency noise and a few flat shapes."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack(
        [
            127 + 100 * np.sin(xx / rng.uniform(20, 80) + rng.uniform(0, 6.28)),
            127 + 100 * np.cos(yy / rng.uniform(20, 80) + rng.uniform(0, 6.28)),
            127 + 100 * np.sin((xx + yy) / rng.uniform(30, 120)),
        ],
        axis=-1,
    )
    base += rng.normal(0, 24, size=(height, width, 3)).astype(np.float32)
    for _ in range(int(rng.integers(2, 6))):
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        x1, y1 = (
            min(width, x0 + int(rng.integers(8, max(9, width // 3)))),
            min(height, y0 + int(rng.integers(8, max(9, height // 3)))),
        )
        base[y0:y1, x0:x1] = rng.uniform(0, 255, size=3)
    image = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8), "RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def sample_sizes(
    n: int,
    rng: np.random.Generator,
    widths: Sequence[int],
    heights: Sequence[int],
) -> list[tuple[int, int]]:
    """Draw n (width, height) pairs uniformly between the given [min, max] bounds."""
    return [
        (int(rng.integers(widths[0], widths[-1] + 1)), int(rng.integers(heights[0], heights[-1] + 1)))
        for _ in range(n)
    ]


def caption(rng: np.random.Generator, words: int, vocabulary: Sequence[str]) -> str:
    text = " ".join(vocabulary[int(i)] for i in rng.integers(0, len(vocabulary), size=words))
    return text[:1].upper() + text[1:] + "."


# A small fixed vocabulary in the register of cartoon descriptions: enough variety for a
# tokenizer to produce realistic token counts per word.
VOCABULARY = (
    "a man woman dog cat office desk couch doctor patient bar bartender king castle boat island "
    "sitting standing looking at the of in on with his her two people room window door table "
    "chair wall painting car street city park tree bird fish restaurant waiter menu phone computer "
    "meeting business suit hat coat holding talking another while behind next to large small old "
    "young giant tiny robot alien snowman angel devil heaven cloud mountain cave desert sea shore "
    "elevator court judge lawyer jury prisoner cell knight horse dragon wizard museum gallery"
).split()


def cartoon_jpeg_bytes(
    width: int, height: int, rng: np.random.Generator, quality: int = CARTOON_JPEG_QUALITY
) -> bytes:
    """A line-drawing JPEG: ink strokes, outlines and flat gray washes on white paper.

    Cartoons compress far better than photos, so the noise texture of ``jpeg_bytes`` would make
    the stand-ins several times larger than the real files, and entropy decoding costs per byte.
    At the cartoons' sizes and the default quality they average the real set's bytes per row (see
    CARTOON_JPEG_QUALITY). Stored as RGB, like the decode path the published script takes
    (``convert("RGB")``).
    """
    from PIL import ImageDraw

    image = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(30, 60))):
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        x1 = min(width - 1, x0 + int(rng.integers(5, max(6, width // 3))))
        y1 = min(height - 1, y0 + int(rng.integers(5, max(6, height // 3))))
        kind = int(rng.integers(0, 3))
        if kind == 0:
            draw.line([(x0, y0), (x1, y1)], fill=int(rng.integers(0, 60)), width=int(rng.integers(1, 4)))
        elif kind == 1:
            draw.ellipse([x0, y0, x1, y1], outline=int(rng.integers(0, 60)), width=int(rng.integers(1, 3)))
        else:
            draw.rectangle([x0, y0, x1, y1], fill=int(rng.integers(150, 250)), outline=0)
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()
