"""Image preprocessing for BridgeTower-style pipelines: the published path and faster equivalents.

The published script (optimum-habana run_bridgetower.py) converts the whole decoded image to a
float tensor, resizes it (bicubic, antialiased) so the shortest edge is `image_size`, then
center-crops and normalizes. Most of that work is thrown away by the crop. The kit's paths decode
with libjpeg-turbo through simplejpeg (no PIL image objects), touch only the source region that
survives the center crop, stay in uint8 until the small crop is normalized, and:

- ``kit`` (exact): decode at full size, Pillow's antialiased bicubic over the crop box (``box=``);
- ``kit-draft`` (fast): decode at 1/2, 1/4 or 1/8 size in the DCT where the resize allows it
  (never below the crop size), then OpenCV's area resampling (SIMD) to the crop size. Area and
  antialiased bicubic low-pass slightly differently: a few 8-bit levels on average.

Outputs match the published path to a stated tolerance (tests/test_fastimage.py; `make bench`
prints the measured differences). Anything simplejpeg cannot decode (PNG, CMYK JPEG, a PIL image)
takes the same steps through Pillow. ``decode_batch_on_device`` is the CUDA counterpart of Gaudi's
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


def _scaled_box(box: tuple[float, float, float, float], fx: float, fy: float) -> tuple[float, ...]:
    return (box[0] * fx, box[1] * fy, box[2] * fx, box[3] * fy)


class FastImageTransform:
    """The kit's CPU paths: the published output to tolerance, for a fraction of the work."""

    def __init__(
        self,
        image_size: int,
        mean: Sequence[float] = CLIP_MEAN,
        std: Sequence[float] = CLIP_STD,
        draft: bool = True,
    ) -> None:
        import cv2
        import simplejpeg

        self.cv2, self.simplejpeg = cv2, simplejpeg
        # The loader's workers are the parallelism; one OpenCV thread each, as one PIL thread.
        cv2.setNumThreads(1)
        self.image_size = image_size
        self.draft = draft
        # Normalization folded into one multiply-add on uint8 input: (x/255 - mean)/std.
        self.scale = torch.tensor([1.0 / (255.0 * s) for s in std]).view(3, 1, 1)
        self.shift = torch.tensor([-m / s for m, s in zip(mean, std, strict=True)]).view(3, 1, 1)

    def _decode(self, data: bytes | Image.Image) -> tuple[np.ndarray | Image.Image, int, int]:
        """(pixels, full width, full height); a numpy HxWx3 array where simplejpeg can decode it."""
        if isinstance(data, bytes | bytearray | memoryview) and bytes(data[:2]) == b"\xff\xd8":
            try:
                height, width = self.simplejpeg.decode_jpeg_header(data)[:2]
                sizes = {}
                factor = min(width, height) / self.image_size
                if self.draft and factor >= 2:
                    # The largest power-of-two reduction that keeps the crop at full resolution.
                    shrink = 2 ** min(3, int(np.log2(factor)))
                    sizes = {"min_width": -(-width // shrink), "min_height": -(-height // shrink)}
                return self.simplejpeg.decode_jpeg(data, colorspace="RGB", **sizes), width, height
            except ValueError:  # CMYK and other JPEGs libjpeg-turbo's RGB output does not cover
                pass
        image = _open_rgb(data)
        width, height = image.size
        if self.draft and image.format == "JPEG" and min(width, height) / self.image_size >= 2:
            factor = min(width, height) / self.image_size
            image.draft("RGB", (int(width / factor) + 1, int(height / factor) + 1))
        return image.convert("RGB"), width, height

    def __call__(self, data: bytes | Image.Image) -> torch.Tensor:
        pixels, width, height = self._decode(data)
        decoded_w, decoded_h = pixels.size if isinstance(pixels, Image.Image) else pixels.shape[1::-1]
        # The crop box is in full-resolution pixels; a reduced decode shrank the image by an exact factor.
        box = _scaled_box(_center_box(width, height, self.image_size), decoded_w / width, decoded_h / height)
        size = (self.image_size, self.image_size)
        if self.draft:
            array = np.asarray(pixels)
            left, top = int(box[0]), int(box[1])
            right, bottom = int(np.ceil(box[2])), int(np.ceil(box[3]))
            array = self.cv2.resize(array[top:bottom, left:right], size, interpolation=self.cv2.INTER_AREA)
        else:
            image = pixels if isinstance(pixels, Image.Image) else Image.fromarray(pixels)
            array = np.array(image.resize(size, Image.Resampling.BICUBIC, box=box))  # writable, for torch
        chw = torch.from_numpy(np.ascontiguousarray(array)).permute(2, 0, 1)
        return torch.addcmul(self.shift, chw, self.scale)


def decode_batch_on_device(
    jpegs: Sequence[bytes],
    image_size: int,
    device: torch.device | str,
    mean: Sequence[float] = CLIP_MEAN,
    std: Sequence[float] = CLIP_STD,
) -> torch.Tensor:
    """Decode JPEG bytes on ``device`` (nvJPEG on CUDA), resize, crop, normalize: [N, 3, S, S] float.

    The published path's steps (bicubic tensor Resize without antialias, as torchvision's tensor
    Resize did then), through the shared decoder (common/gpudecode.py: stream-safe, CPU fallback)."""
    from reprokit_trainers.common.gpudecode import decode_resize_center_crop

    return decode_resize_center_crop(
        jpegs, image_size, device, mean, std, interpolation="bicubic", antialias=False
    )
