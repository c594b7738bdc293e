"""Image preprocessing for BridgeTower-style pipelines: the published path and faster equivalents.

The published script (optimum-habana run_bridgetower.py) converts the whole decoded image to a
float tensor, resizes it with a bicubic filter so the shortest edge is `image_size`, then
center-crops and normalizes. The torchvision it ran on (0.14-0.16, 2023) did not antialias tensors:
``Resize`` without an ``antialias`` argument meant False for a tensor (0.15 and 0.16 warned that the
default would change in 0.17, and it did). So the published filter is a plain 4-tap bicubic
(a = -0.75) sampled at the output pixels, which aliases when it shrinks; ``published_transform``
asks for exactly that, whatever torchvision is installed.

The kit's paths compute the same resample on uint8 pixels with OpenCV (whose ``INTER_CUBIC`` is that
filter, with the same half-pixel mapping, and does not antialias either), decode with libjpeg-turbo
through simplejpeg (no PIL image objects), and stay in uint8 until the crop is normalized:

- ``kit`` (exact): full-precision decode; equal to the published output but for uint8 rounding
  and clamping (mean difference about 1/4 of an 8-bit level);
- ``kit-draft`` (fast): libjpeg-turbo's fast integer IDCT and fast chroma upsampling, then the same
  resample: a few 8-bit levels off on noisy photos, a fraction of one on line drawings.

A reduced-size decode in the DCT (the old draft path) low-passes before the resample, which the
published path never did: it would not give the published output, so the kit no longer uses it.
Outputs match the published path to a stated tolerance (tests/test_fastimage.py; `make bench`
prints the measured differences). Anything simplejpeg cannot decode (PNG, CMYK JPEG, a PIL image)
is decoded by Pillow and resampled the same way. ``decode_batch_on_device`` is the CUDA counterpart
of Gaudi's mediapipe: the loader ships JPEG bytes, the GPU decodes (nvJPEG) and resizes.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence

import numpy as np
import torch
from PIL import Image

# CLIP's mean/std: what BridgeTower's image processor normalizes with.
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def _open(data: bytes | Image.Image) -> Image.Image:
    return data if isinstance(data, Image.Image) else Image.open(io.BytesIO(data))


class ImageModeError(ValueError):
    """An image the published transform cannot take: its run failed on it at Normalize."""


def published_pixels(image: Image.Image) -> torch.Tensor:
    """A decoded image as optimum-habana v1.7.0's ``get_image`` hands it to the transform: an RGB
    image as it is (no ``convert`` copy), a one-band image (L, P, 1) made grey RGB, float in [0, 1].

    Any other mode (RGBA, CMYK, LA, ...) became a 4- or 2-channel tensor there and the run failed at
    Normalize; the kit stops on it with one line instead."""
    from torchvision.transforms.functional import to_grayscale, to_tensor

    bands = len(image.getbands())
    if bands == 1:
        image = to_grayscale(image, num_output_channels=3)
    elif image.mode != "RGB":
        raise ImageModeError(
            f"an image of mode {image.mode}: the published transform takes RGB or one-band images (its "
            "run failed on this one at Normalize); convert the dataset's images or use --image_pipeline kit"
        )
    return to_tensor(image)


def published_transform(
    image_size: int, mean: Sequence[float] = CLIP_MEAN, std: Sequence[float] = CLIP_STD
) -> Callable[[bytes | Image.Image], torch.Tensor]:
    """The published script's CPU path as it ran: PIL decode -> to_tensor (published_pixels) ->
    Resize (bicubic, not antialiased, on a float tensor: no clamping either) -> CenterCrop -> Normalize."""
    from torchvision.transforms import CenterCrop, ConvertImageDtype, InterpolationMode, Normalize, Resize

    pipeline = torch.nn.Sequential(
        # torchvision 0.14-0.16's default for tensors; said explicitly, since 0.17 turned it on.
        Resize([image_size], interpolation=InterpolationMode.BICUBIC, antialias=False),
        CenterCrop(image_size),
        ConvertImageDtype(torch.float),
        Normalize(mean, std),
    )

    def transform(data: bytes | Image.Image) -> torch.Tensor:
        pixels = published_pixels(_open(data))
        with torch.no_grad():
            return pipeline(pixels)

    return transform


def resized_geometry(width: int, height: int, image_size: int) -> tuple[int, int, int, int]:
    """(resized width, resized height, crop left, crop top) of the published resize-then-center-crop."""
    # torchvision's Resize([size]) sets the short edge and truncates the long one; CenterCrop rounds.
    if width <= height:
        new_w, new_h = image_size, int(image_size * height / width)
    else:
        new_w, new_h = int(image_size * width / height), image_size
    return new_w, new_h, int(round((new_w - image_size) / 2.0)), int(round((new_h - image_size) / 2.0))


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

    def _decode(self, data: bytes | Image.Image) -> np.ndarray:
        """HxWx3 uint8 RGB pixels at full size."""
        if isinstance(data, bytes | bytearray | memoryview) and bytes(data[:2]) == b"\xff\xd8":
            try:
                return self.simplejpeg.decode_jpeg(
                    data, colorspace="RGB", fastdct=self.draft, fastupsample=self.draft
                )
            except ValueError:  # CMYK and other JPEGs libjpeg-turbo's RGB output does not cover
                pass
        return np.asarray(_open(data).convert("RGB"))

    def __call__(self, data: bytes | Image.Image) -> torch.Tensor:
        pixels = self._decode(data)
        height, width = pixels.shape[:2]
        new_w, new_h, left, top = resized_geometry(width, height, self.image_size)
        # The whole resized image, then the crop: OpenCV maps the pixels exactly as torch does.
        resized = self.cv2.resize(pixels, (new_w, new_h), interpolation=self.cv2.INTER_CUBIC)
        crop = resized[top : top + self.image_size, left : left + self.image_size]
        chw = torch.from_numpy(np.ascontiguousarray(crop)).permute(2, 0, 1)
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
    Resize did then), through the shared decoder (common/data/gpudecode.py: stream-safe, CPU fallback)."""
    from reprokit_trainers.common.data.gpudecode import decode_resize_center_crop

    return decode_resize_center_crop(
        jpegs, image_size, device, mean, std, interpolation="bicubic", antialias=False
    )
