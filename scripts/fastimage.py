"""Image preprocessing for BridgeTower-style pipelines: the published path and faster equivalents.

The published script (optimum-habana run_bridgetower.py) converts the whole decoded image to a
float tensor, resizes it (bicubic, antialiased) so the shortest edge is `image_size`, then
center-crops and normalizes. Most of that work is thrown away by the crop. The kit's path:

1. decodes the JPEG at a reduced size where the DCT allows it (``draft``: libjpeg scales by
   1/2, 1/4 or 1/8 while decoding, never below what the resize needs);
2. resizes only the source region that survives the center crop, in uint8 (Pillow's resample,
   with ``box=``), straight to the crop size;
3. converts to float and normalizes the small crop only.

Outputs match the published path to a stated tolerance (tests/test_fastimage.py; `make bench`
prints the measured differences). ``decode_batch_on_device`` is the CUDA counterpart of Gaudi's
mediapipe: the loader ships JPEG bytes, the GPU decodes (nvJPEG) and resizes.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image

# CLIP's mean/std: what BridgeTower's image processor normalizes with.
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def _open_rgb(data: bytes | Image.Image) -> Image.Image:
    image = data if isinstance(data, Image.Image) else Image.open(io.BytesIO(data))
    return image


def published_transform(image_size: int, mean: Sequence[float] = CLIP_MEAN, std: Sequence[float] = CLIP_STD):
    """The published script's CPU path: PIL decode -> to_tensor -> Resize(bicubic) -> CenterCrop -> Normalize."""
    from torchvision.transforms import CenterCrop, ConvertImageDtype, InterpolationMode, Normalize, Resize
    from torchvision.transforms.functional import to_tensor

    pipeline = torch.nn.Sequential(
        Resize([image_size], interpolation=InterpolationMode.BICUBIC, antialias=True),
        CenterCrop(image_size),
        ConvertImageDtype(torch.float),
        Normalize(mean, std),
    )

    def transform(data: bytes | Image.Image) -> torch.Tensor:
        image = _open_rgb(data).convert("RGB")
        with torch.no_grad():
            return pipeline(to_tensor(image))

    return transform


def _center_box(width: int, height: int, image_size: int) -> tuple[float, float, float, float]:
    """The source rectangle that the published resize-then-center-crop keeps, in source pixels."""
    # torchvision's Resize([size]) sets the short edge and truncates the long one.
    if width <= height:
        new_w, new_h = image_size, int(image_size * height / width)
    else:
        new_w, new_h = int(image_size * width / height), image_size
    left = int(round((new_w - image_size) / 2.0))
    top = int(round((new_h - image_size) / 2.0))
    sx, sy = width / new_w, height / new_h
    return (left * sx, top * sy, (left + image_size) * sx, (top + image_size) * sy)


class FastImageTransform:
    """The kit's CPU path: same output as ``published_transform`` to tolerance, a fraction of the work."""

    def __init__(
        self,
        image_size: int,
        mean: Sequence[float] = CLIP_MEAN,
        std: Sequence[float] = CLIP_STD,
        draft: bool = True,
    ) -> None:
        self.image_size = image_size
        self.draft = draft
        # Normalization folded into one multiply-add on uint8 input: (x/255 - mean)/std.
        self.scale = torch.tensor([1.0 / (255.0 * s) for s in std]).view(3, 1, 1)
        self.shift = torch.tensor([-m / s for m, s in zip(mean, std, strict=True)]).view(3, 1, 1)

    def __call__(self, data: bytes | Image.Image) -> torch.Tensor:
        image = _open_rgb(data)
        full_w, full_h = image.size
        if self.draft and image.format == "JPEG":
            # Ask for at least the size the resize needs: libjpeg picks the largest 1/2^k below it.
            factor = min(full_w, full_h) / self.image_size
            if factor >= 2:
                image.draft("RGB", (int(full_w / factor) + 1, int(full_h / factor) + 1))
        image = image.convert("RGB")
        box = _center_box(full_w, full_h, self.image_size)
        # The box is in full-resolution pixels; a draft decode shrank the image by an exact factor.
        fx, fy = image.size[0] / full_w, image.size[1] / full_h
        box = (box[0] * fx, box[1] * fy, box[2] * fx, box[3] * fy)
        size = (self.image_size, self.image_size)
        resized = image.resize(size, Image.Resampling.BICUBIC, box=box)
        array = torch.from_numpy(np.asarray(resized, dtype=np.uint8).copy()).permute(2, 0, 1)
        return array.to(torch.float32).mul_(self.scale).add_(self.shift)


def decode_batch_on_device(
    jpegs: Sequence[bytes],
    image_size: int,
    device: torch.device | str,
    mean: Sequence[float] = CLIP_MEAN,
    std: Sequence[float] = CLIP_STD,
) -> torch.Tensor:
    """Decode JPEG bytes on ``device`` (nvJPEG on CUDA), resize, crop, normalize: [N, 3, S, S] float."""
    from torchvision.io import ImageReadMode, decode_jpeg
    from torchvision.transforms.v2.functional import center_crop, resize

    device = torch.device(device)
    tensors = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in jpegs]
    decoded = decode_jpeg(tensors, mode=ImageReadMode.RGB, device=device)
    mean_t = torch.tensor(mean, device=device).view(3, 1, 1)
    std_t = torch.tensor(std, device=device).view(3, 1, 1)
    out = []
    for image in decoded:
        image = resize(image.float().div_(255.0), [image_size], antialias=True)
        image = center_crop(image, [image_size, image_size])
        out.append((image - mean_t) / std_t)
    return torch.stack(out)
