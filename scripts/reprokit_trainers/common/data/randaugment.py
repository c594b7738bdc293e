"""timm's RandAugment on batches of uint8 images on the device, for the loaders that decode on a GPU.

sail-sg/volo trains with timm's ``rand-m9-mstd0.5-inc1``: each image gets two ops drawn with
replacement from timm's fifteen "increasing" ops, each applied with probability 0.5 at a magnitude
drawn from N(9, 0.5) and clipped to [0, 10]. The CPU loaders run timm's own PIL ops. This module runs
the same policy on tensors: each op on the images that drew it, with timm's mappings from magnitude
to parameter and Pillow's arithmetic (its luma weights, truncating blends, its histogram
equalization, affine sampling with a hard edge filled with the mean colour and Pillow's cubic), so
an image comes out as timm's would, to a level or two (tests/test_randaugment.py).

Only what timm's ``rand`` policies do with the default op sets is here; a policy string asking for
anything else (another op set, AugMix, AutoAugment) is refused in one line, never approximated.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch

# timm's op sets for `rand` policies: `inc1` picks the set whose ops grow stronger with the magnitude.
OPS = (
    "AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd", "Color",
    "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel",
)  # fmt: skip
INCREASING_OPS = (
    "AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing", "SolarizeIncreasing",
    "SolarizeAdd", "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing",
    "SharpnessIncreasing", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel",
)  # fmt: skip
GEOMETRIC = ("Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")
INTERPOLATIONS = ("random", "bilinear", "bicubic")
LEVEL_DENOM = 10.0  # timm's magnitude scale: M10 is an op's full strength


@dataclass(frozen=True)
class Policy:
    """A parsed ``rand-...`` policy string, with timm's defaults."""

    ops: tuple[str, ...] = OPS
    magnitude: float = LEVEL_DENOM
    num_layers: int = 2
    prob: float = 0.5
    magnitude_std: float = 0.0
    magnitude_max: float = LEVEL_DENOM


def parse_policy(text: str) -> Policy:
    """timm's ``rand-m9-mstd0.5-inc1`` grammar: ``m`` magnitude, ``n`` ops per image, ``p`` probability
    of each op, ``mstd`` magnitude noise (above 100: uniform in [0, m]), ``mmax`` magnitude bound,
    ``inc`` the increasing op set. Raises ValueError, in one line, for anything not implemented here."""
    sections = text.split("-")
    if sections[0] != "rand":
        raise ValueError(
            f"--auto_augment {text}: the GPU loaders implement timm's RandAugment policies (rand-...) only"
        )
    fields: dict[str, float] = {}
    increasing = False
    for section in sections[1:]:
        match = re.fullmatch(r"([a-z]+)(\d.*)", section)
        if section.startswith("t"):
            raise ValueError(
                f"--auto_augment {text}: op sets other than timm's default ({section!r}) are not implemented"
            )
        if not match:
            raise ValueError(f"--auto_augment {text}: cannot read the section {section!r}")
        key, value = match.groups()
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"--auto_augment {text}: {section!r} is not a number") from None
        if key == "inc":
            # timm reads any `inc<digits>` as on (its bool("0") is True); the GPU loader does as the CPU one.
            increasing = True
        elif key == "mstd":
            fields["magnitude_std"] = math.inf if number > 100 else number
        elif key in ("m", "n", "mmax"):
            if number != int(number):
                raise ValueError(f"--auto_augment {text}: {section!r} must be an integer")
            fields[{"m": "magnitude", "n": "num_layers", "mmax": "magnitude_max"}[key]] = int(number)
        elif key == "p":
            fields["prob"] = number
        else:
            raise ValueError(f"--auto_augment {text}: unknown section {section!r}")
    return Policy(ops=INCREASING_OPS if increasing else OPS, **fields)


# ----------------------------------------------------------------------------------------------
# Magnitude -> parameter, as timm maps them (sign: timm negates half of the signed ones at random)


def op_parameter(name: str, level: torch.Tensor, sign: torch.Tensor) -> torch.Tensor:
    """Each image's parameter of op ``name`` at magnitude ``level`` (float64, CPU), ``sign`` +-1."""
    fraction = level / LEVEL_DENOM
    if name == "Rotate":
        return fraction * 30.0 * sign
    if name in ("ShearX", "ShearY"):
        return fraction * 0.3 * sign
    if name in ("TranslateXRel", "TranslateYRel"):
        return fraction * 0.45 * sign
    if name in ("Posterize", "PosterizeIncreasing"):
        bits = torch.floor(fraction * 4)
        return 4 - bits if name.endswith("Increasing") else bits
    if name in ("Solarize", "SolarizeIncreasing"):
        threshold = torch.clamp(torch.floor(fraction * 256), max=256)
        return 256 - threshold if name.endswith("Increasing") else threshold
    if name == "SolarizeAdd":
        return torch.clamp(torch.floor(fraction * 110), max=128)
    if name.endswith("Increasing"):  # Color, Contrast, Brightness, Sharpness: 1 is no change
        return torch.clamp(1.0 + fraction * 0.9 * sign, min=0.1)
    if name in ("Color", "Contrast", "Brightness", "Sharpness"):
        return fraction * 1.8 + 0.1
    return torch.zeros_like(level)  # AutoContrast, Equalize, Invert take none


# ----------------------------------------------------------------------------------------------
# The ops: uint8 [N, 3, H, W] in and out, one parameter per image


def _per_image(values: torch.Tensor, images: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return values.to(device=images.device, dtype=dtype).view(-1, 1, 1, 1)


def apply_lut(images: torch.Tensor, lut: torch.Tensor) -> torch.Tensor:
    """Map every pixel through its image's (and channel's) table: lut [N, 3 or 1, 256]."""
    n, c, h, w = images.shape
    table = lut.to(torch.uint8).expand(n, c, 256)
    return torch.gather(table, 2, images.reshape(n, c, h * w).long()).reshape(n, c, h, w)


def invert(images: torch.Tensor) -> torch.Tensor:
    return 255 - images


def posterize(images: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """Keep the top ``bits`` bits; 0 bits is black (Pillow of the publication's time; Pillow 13 refuses)."""
    kept = [255 if b >= 8 else (0xFF << (8 - int(b))) & 0xFF for b in bits.tolist()]
    return images & _per_image(torch.tensor(kept), images, torch.uint8)


def solarize(images: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """Invert the pixels at or above the threshold (256: none)."""
    at_or_above = images.to(torch.int16) >= _per_image(threshold, images, torch.int16)
    return torch.where(at_or_above, 255 - images, images)


def solarize_add(images: torch.Tensor, add: torch.Tensor, threshold: int = 128) -> torch.Tensor:
    """Add to the pixels below the threshold, saturating at 255."""
    raised = torch.clamp(images.to(torch.int16) + _per_image(add, images, torch.int16), max=255)
    return torch.where(images < threshold, raised.to(torch.uint8), images)


def auto_contrast(images: torch.Tensor) -> torch.Tensor:
    """Stretch each channel's range to 0-255 (Pillow's autocontrast without cutoff)."""
    low = images.amin(dim=(2, 3)).double()
    high = images.amax(dim=(2, 3)).double()
    spread = high > low
    scale = 255.0 / torch.where(spread, high - low, torch.ones_like(high))
    offset = -low * scale
    levels = torch.arange(256, device=images.device, dtype=torch.float64)
    # Pillow truncates ix * scale + offset, in that order of operations, then clips.
    stretched = torch.trunc(levels * scale[..., None] + offset[..., None]).clamp(0, 255)
    lut = torch.where(spread[..., None], stretched, levels)
    return apply_lut(images, lut)


def equalize(images: torch.Tensor) -> torch.Tensor:
    """Pillow's histogram equalization, per image and channel."""
    n, c, h, w = images.shape
    rows = images.reshape(n * c, h * w).long()
    # scatter_add_ rather than bincount: on CUDA bincount reads its input's maximum back to the host.
    hist = torch.zeros(n * c, 256, dtype=torch.long, device=images.device)
    hist.scatter_add_(1, rows, torch.ones_like(rows))
    occupied = hist > 0
    highest = 255 - occupied.flip(1).int().argmax(dim=1)
    # Pillow's step leaves out the highest occupied bin, so the brightest pixels land on 255.
    step = (hist.sum(dim=1) - hist.gather(1, highest.view(-1, 1)).squeeze(1)) // 255
    identity = (occupied.sum(dim=1) <= 1) | (step == 0)
    below = torch.cumsum(hist, dim=1) - hist
    safe_step = torch.where(identity, torch.ones_like(step), step).view(-1, 1)
    lut = ((safe_step // 2 + below) // safe_step).clamp(max=255)
    levels = torch.arange(256, device=images.device).expand_as(lut)
    lut = torch.where(identity.view(-1, 1), levels, lut)
    return apply_lut(images, lut.view(n, c, 256))


def luma(images: torch.Tensor) -> torch.Tensor:
    """Pillow's RGB -> L in its fixed point (ITU-R 601-2 weights, rounded): [N, 1, H, W] int32."""
    r, g, b = images.to(torch.int32).unbind(dim=1)
    return ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).unsqueeze(1)


def blend(degenerate: torch.Tensor, images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Pillow's Image.blend(degenerate, images, factor): float32 arithmetic, truncated, clipped."""
    base = degenerate.to(torch.float32)
    alpha = _per_image(factor, images, torch.float32)
    return torch.trunc(base + alpha * (images.to(torch.float32) - base)).clamp(0, 255).to(torch.uint8)


def color(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return blend(luma(images), images, factor)


def contrast(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    mean = torch.floor(luma(images).double().mean(dim=(1, 2, 3), keepdim=True) + 0.5)
    return blend(mean, images, factor)


def brightness(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return blend(torch.zeros((), device=images.device), images, factor)


def smooth(images: torch.Tensor) -> torch.Tensor:
    """Pillow's ImageFilter.SMOOTH (3x3, centre 5, the rest 1, over 13); the border pixels are kept."""
    kernel = torch.ones(3, 3, device=images.device)
    kernel[1, 1] = 5.0
    kernel = (kernel / 13.0).expand(3, 1, 3, 3)
    inner = torch.nn.functional.conv2d(images.to(torch.float32), kernel, groups=3)
    out = images.clone()
    out[:, :, 1:-1, 1:-1] = torch.floor(inner + 0.5).clamp(0, 255).to(torch.uint8)
    return out


def sharpness(images: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    if images.shape[-1] < 3 or images.shape[-2] < 3:
        return images
    return blend(smooth(images), images, factor)


def _cubic_weights(d: torch.Tensor) -> list[torch.Tensor]:
    # Pillow's cubic for affine transforms (Keys' kernel with a = -1), taps at -1, 0, 1, 2.
    d2, d3 = d * d, d * d * d
    return [-d + 2 * d2 - d3, 1 - 2 * d2 + d3, d + d2 - d3, -d2 + d3]


def affine(images: torch.Tensor, matrices: torch.Tensor, fill: Sequence[int], bicubic: bool) -> torch.Tensor:
    """Pillow's ``Image.transform(AFFINE)``: output pixel centre (x, y) samples the input at
    ``matrices @ (x, y, 1)`` (pixel-centre coordinates), bilinear or Pillow's bicubic, neighbours
    clamped at the border; a sample point outside the input takes the fill colour."""
    n, c, h, w = images.shape
    device = images.device
    # Double precision, as Pillow: in float32 a sample point a hair off a pixel centre truncates a level lower.
    m = matrices.to(device=device, dtype=torch.float64).view(n, 6, 1, 1)
    ys = (torch.arange(h, device=device, dtype=torch.float64) + 0.5).view(1, h, 1)
    xs = (torch.arange(w, device=device, dtype=torch.float64) + 0.5).view(1, 1, w)
    sx = m[:, 0] * xs + m[:, 1] * ys + m[:, 2]
    sy = m[:, 3] * xs + m[:, 4] * ys + m[:, 5]
    inside = (sx >= 0) & (sx < w) & (sy >= 0) & (sy < h)
    fx, fy = sx - 0.5, sy - 0.5
    x0, y0 = torch.floor(fx), torch.floor(fy)
    dx, dy = fx - x0, fy - y0
    if bicubic:
        taps, wx, wy = (-1, 0, 1, 2), _cubic_weights(dx), _cubic_weights(dy)
    else:
        taps, wx, wy = (0, 1), [1 - dx, dx], [1 - dy, dy]
    source = images.reshape(n, c, h * w).to(torch.float64)
    out = torch.zeros(n, c, h, w, device=device, dtype=torch.float64)
    for j, oy in enumerate(taps):
        row = (y0 + oy).clamp(0, h - 1).long() * w
        for i, ox in enumerate(taps):
            index = (row + (x0 + ox).clamp(0, w - 1).long()).view(n, 1, h * w).expand(n, c, h * w)
            out += (wy[j] * wx[i]).unsqueeze(1) * source.gather(2, index).view(n, c, h, w)
    pixels = torch.trunc(out.clamp(0, 255)).to(torch.uint8)
    background = torch.tensor(list(fill), device=device, dtype=torch.uint8).view(1, c, 1, 1)
    return torch.where(inside.unsqueeze(1), pixels, background)


def geometric_matrices(name: str, parameter: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """The inverse affine maps (output -> input, pixel-centre coordinates) of timm's geometric ops,
    [N, 6] as Pillow's (a, b, c, d, e, f). Shears are about the top-left corner, as timm's."""
    p = parameter.double()
    one, zero = torch.ones_like(p), torch.zeros_like(p)
    if name == "ShearX":
        return torch.stack([one, p, zero, zero, one, zero], dim=1)
    if name == "ShearY":
        return torch.stack([one, zero, zero, p, one, zero], dim=1)
    if name == "TranslateXRel":
        return torch.stack([one, zero, p * width, zero, one, zero], dim=1)
    if name == "TranslateYRel":
        return torch.stack([one, zero, zero, zero, one, p * height], dim=1)
    if name == "Rotate":
        # Pillow's rotate: about the centre, counter-clockwise for positive degrees, with its
        # cos/sin rounded to 15 digits.
        angle = -torch.deg2rad(torch.remainder(p, 360.0))
        cos, sin = torch.round(torch.cos(angle), decimals=15), torch.round(torch.sin(angle), decimals=15)
        cx, cy = width / 2, height / 2
        tx = cos * -cx + sin * -cy + cx
        ty = -sin * -cx + cos * -cy + cy
        return torch.stack([cos, sin, tx, -sin, cos, ty], dim=1)
    raise ValueError(f"{name} is not a geometric op")


# The ops that are not geometric, by timm's name less "Increasing" (an Increasing op differs in its
# parameter only): those that take none, and those that take one per image.
PLAIN_OPS = {"AutoContrast": auto_contrast, "Equalize": equalize, "Invert": invert}
PARAMETER_OPS = {
    "Posterize": posterize,
    "Solarize": solarize,
    "SolarizeAdd": solarize_add,
    "Color": color,
    "Contrast": contrast,
    "Brightness": brightness,
    "Sharpness": sharpness,
}


def apply_op(
    name: str,
    images: torch.Tensor,
    level: torch.Tensor,
    sign: torch.Tensor,
    bicubic: torch.Tensor,
    fill: Sequence[int],
) -> torch.Tensor:
    """Op ``name`` on a batch at each image's magnitude and sign (CPU tensors, one value per image);
    ``bicubic``: which images the geometric ops resample bicubic rather than bilinear."""
    parameter = op_parameter(name, level.double(), sign.double())
    base = name.removesuffix("Increasing")
    if name in GEOMETRIC:
        out = images.clone()
        height, width = images.shape[-2:]
        for cubic in (False, True):
            rows = (bicubic == cubic).nonzero().flatten()
            if rows.numel():
                matrices = geometric_matrices(name, parameter[rows], width, height)
                rows_here = rows.to(images.device)
                out[rows_here] = affine(images[rows_here], matrices, fill, cubic)
        return out
    if base in PLAIN_OPS:
        return PLAIN_OPS[base](images)
    if base in PARAMETER_OPS:
        return PARAMETER_OPS[base](images, parameter)
    raise ValueError(f"unknown RandAugment op {name}")


class DeviceRandAugment:
    """A ``rand-...`` policy on uint8 batches [N, 3, H, W] on any device.

    Draws as timm does, per image and per layer: an op uniformly (with replacement), whether it
    applies (``prob``), its magnitude (N(m, mstd) clipped to [0, mmax]; uniform in [0, m] for an
    infinite mstd), the sign of a signed op, and for geometric ops bilinear or bicubic
    (``interpolation="random"``, timm's default when ``--train_interpolation`` is random). The draws
    come from a CPU generator of their own (seeded per rank), so the device never waits on them.
    """

    def __init__(
        self, policy: Policy, fill: Sequence[int], interpolation: str = "random", seed: int = 0
    ) -> None:
        if interpolation not in INTERPOLATIONS:
            raise ValueError(f"interpolation {interpolation}: choose one of {', '.join(INTERPOLATIONS)}")
        self.policy = policy
        self.fill = tuple(int(v) for v in fill)
        self.interpolation = interpolation
        self.generator = torch.Generator().manual_seed(seed)

    def _magnitudes(self, n: int) -> torch.Tensor:
        m, std = float(self.policy.magnitude), self.policy.magnitude_std
        if std == math.inf:
            level = torch.rand(n, generator=self.generator, dtype=torch.float64) * m
        elif std > 0:
            level = m + std * torch.randn(n, generator=self.generator, dtype=torch.float64)
        else:
            level = torch.full((n,), m, dtype=torch.float64)
        return level.clamp(0.0, float(self.policy.magnitude_max))

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        n = images.shape[0]
        out = images
        for _ in range(self.policy.num_layers):
            choice = torch.randint(len(self.policy.ops), (n,), generator=self.generator)
            applied = torch.rand(n, generator=self.generator) <= self.policy.prob
            level = self._magnitudes(n)
            sign = torch.where(torch.rand(n, generator=self.generator) > 0.5, -1.0, 1.0)
            if self.interpolation == "random":
                bicubic = torch.rand(n, generator=self.generator) < 0.5
            else:
                bicubic = torch.full((n,), self.interpolation == "bicubic")
            for k, name in enumerate(self.policy.ops):
                rows = ((choice == k) & applied).nonzero().flatten()
                if rows.numel() == 0:
                    continue
                if out is images:
                    out = images.clone()  # the caller's batch stays as it was
                here = rows.to(images.device)
                out[here] = apply_op(name, out[here], level[rows], sign[rows], bicubic[rows], self.fill)
        return out
