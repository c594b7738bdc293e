"""Decode JPEG bytes on the device (nvJPEG through torchvision) for the image trainers' GPU loaders.

Shared by VOLO's ``--loader gpu_decode`` and BridgeTower's device decode. Three things the bare
``torchvision.io.decode_jpeg(..., device="cuda")`` call does not do for a training loop:

- **Streams.** torchvision allocates the decoded images while the caller's stream is current, then
  decodes on a stream of its own without waiting for the caller's (pytorch/vision#9606): the
  caching allocator may hand it a block that kernels still queued on that stream read, and nvJPEG
  overwrites it first. The decoder here runs on a stream of its own and synchronizes it before
  each decode, so every block that stream's pool can hand out is idle; the training stream keeps
  running meanwhile (the decode overlaps the previous step) and waits for the result's hand-over.
- **What nvJPEG cannot decode.** ImageNet's train split holds a PNG named .JPEG and CMYK JPEGs;
  those, recognized by their header, and any image nvJPEG refuses, are decoded on the CPU with
  Pillow (``convert("RGB")``, as the published PIL loaders do, and as DALI falls back per image),
  and counted (``cpu_fallbacks``): a per-image fallback is what the published loaders do too.
- **Resizing as the published paths do.** ``resized_crop`` takes the interpolation and whether to
  antialias: timm's RandomResizedCrop resizes with Pillow (antialiased), BridgeTower's published
  script with torchvision's tensor Resize (not antialiased).

The decoding device is a parameter: on the CPU the same code decodes with torchvision's libjpeg
decoder, which is how the tests exercise it.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache

import numpy as np
import torch
from PIL import Image

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Start-of-frame markers (SOF0-SOF15, less DHT C4, JPG C8 and DAC CC): they carry the component count.
_SOF_MARKERS = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_STANDALONE = {0x01, *range(0xD0, 0xD8)}  # TEM and RSTn have no length field


def jpeg_components(data: bytes) -> int | None:
    """The colour components of a JPEG's frame (1 grey, 3 YCbCr/RGB, 4 CMYK/YCCK), or None when the
    bytes are not a JPEG or no frame header is found."""
    if data[:2] != b"\xff\xd8":
        return None
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _STANDALONE:
            pos += 2
            continue
        if marker in _SOF_MARKERS:
            return data[pos + 9] if pos + 9 < len(data) else None
        if marker == 0xDA:  # scan data before any frame: malformed
            return None
        pos += 2 + int.from_bytes(data[pos + 2 : pos + 4], "big")
    return None


def nvjpeg_decodable(data: bytes) -> bool:
    """A JPEG of one or three components: what nvJPEG decodes to RGB. PNGs, CMYK and YCCK JPEGs and
    anything unreadable go to the CPU."""
    return jpeg_components(data) in (1, 3)


def _as_bytes(blob: bytes | torch.Tensor) -> bytes:
    return blob.numpy().tobytes() if isinstance(blob, torch.Tensor) else bytes(blob)


def _as_tensor(blob: bytes | torch.Tensor) -> torch.Tensor:
    if isinstance(blob, torch.Tensor):
        return blob
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8)


class UndecodableImage(ValueError):
    """Image ``index`` of a batch that neither nvJPEG nor Pillow decodes (the caller names its file)."""

    def __init__(self, index: int, error: BaseException) -> None:
        super().__init__(str(error))
        self.index = index
        self.error = error


def pil_decode(data: bytes) -> torch.Tensor:
    """Pillow's decode, converted to RGB: uint8 [3, H, W] on the CPU."""
    image = Image.open(io.BytesIO(data)).convert("RGB")
    return torch.from_numpy(np.asarray(image, dtype=np.uint8).copy()).permute(2, 0, 1)


class _DecodeStream:
    """The decoder's own CUDA stream and the two moments it meets the caller's (see the module doc)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device)

    @contextmanager
    def active(self) -> Iterator[None]:
        # Every block this stream's allocator pool can hand out is then idle: nothing queued on the
        # stream still reads it when nvJPEG writes. The training stream is not waited for.
        self.stream.synchronize()
        with torch.cuda.stream(self.stream):
            yield

    def hand_over(self, tensor: torch.Tensor) -> torch.Tensor:
        current = torch.cuda.current_stream(self.device)
        current.wait_stream(self.stream)
        # The tensor's block belongs to the decode stream's pool; it must not be reused before the
        # training stream is done with it.
        tensor.record_stream(current)
        return tensor


class DeviceDecoder:
    """Decodes batches of JPEG (or other image) bytes to uint8 RGB [3, H, W] tensors on ``device``."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.cpu_fallbacks = 0
        self.streams = _DecodeStream(self.device) if self.device.type == "cuda" else None

    def run(
        self, blobs: Sequence[bytes | torch.Tensor], finish: Callable[[list[torch.Tensor]], torch.Tensor]
    ) -> torch.Tensor:
        """Decode ``blobs`` and apply ``finish`` (the caller's device-side preprocessing, e.g. crop,
        augment, stack) on the decode stream; the result is ready for the caller's stream."""
        if self.streams is None:
            return finish(self.decode(blobs))
        with self.streams.active():
            out = finish(self.decode(blobs))
        return self.streams.hand_over(out)

    def decode(self, blobs: Sequence[bytes | torch.Tensor]) -> list[torch.Tensor]:
        """The images in order; call it inside ``run`` on a CUDA device (the stream guard)."""
        from torchvision.io import ImageReadMode, decode_jpeg

        datas = [_as_bytes(b) for b in blobs]
        out: list[torch.Tensor | None] = [None] * len(datas)
        on_device = [i for i, data in enumerate(datas) if nvjpeg_decodable(data)]
        if on_device:
            tensors = [_as_tensor(blobs[i]) for i in on_device]
            try:
                decoded = decode_jpeg(tensors, mode=ImageReadMode.RGB, device=self.device)
            except RuntimeError:
                # One bad image fails the whole batched call: retry one by one, keep what decodes.
                decoded = [self._decode_one(t, decode_jpeg, ImageReadMode.RGB) for t in tensors]
            for i, image in zip(on_device, decoded, strict=True):
                if image is not None and image.shape[0] == 3:
                    out[i] = image
        for i, image in enumerate(out):
            if image is None:
                try:
                    out[i] = pil_decode(datas[i]).to(self.device, non_blocking=True)
                except (OSError, ValueError) as error:  # PIL: truncated, or not an image at all
                    raise UndecodableImage(i, error) from None
                self.cpu_fallbacks += 1
        return out  # type: ignore[return-value]

    def _decode_one(self, tensor: torch.Tensor, decode_jpeg, mode) -> torch.Tensor | None:
        try:
            return decode_jpeg(tensor, mode=mode, device=self.device)
        except RuntimeError:
            return None


@cache
def decoder_for(device: str) -> DeviceDecoder:
    """One decoder (and decode stream) per device, for callers without a place to keep one."""
    return DeviceDecoder(device)


_MODES = ("bilinear", "bicubic")


def resized_crop(
    image: torch.Tensor,
    box: tuple[int, int, int, int],
    size: int,
    interpolation: str = "bicubic",
    antialias: bool = True,
) -> torch.Tensor:
    """Crop ``box`` = (top, left, height, width) of a [C, H, W] image and resize it to size x size.

    uint8 in, uint8 out (rounded and clipped), as Pillow's resize; a float image stays float and
    unclipped, as torchvision's tensor Resize leaves it."""
    from torchvision.transforms.v2 import InterpolationMode
    from torchvision.transforms.v2 import functional as F

    if interpolation not in _MODES:
        raise ValueError(f"interpolation {interpolation}: choose one of {', '.join(_MODES)}")
    mode = InterpolationMode.BICUBIC if interpolation == "bicubic" else InterpolationMode.BILINEAR
    top, left, height, width = box
    return F.resized_crop(image, top, left, height, width, [size, size], mode, antialias=antialias)


def decode_resize_center_crop(
    blobs: Sequence[bytes | torch.Tensor],
    size: int,
    device: torch.device | str,
    mean: Sequence[float],
    std: Sequence[float],
    interpolation: str = "bicubic",
    antialias: bool = False,
) -> torch.Tensor:
    """Decode on ``device``, then torchvision's float path: /255, Resize([size]) (short side),
    CenterCrop(size), Normalize: [N, 3, size, size] float (BridgeTower's published preprocessing)."""
    from torchvision.transforms.v2 import InterpolationMode
    from torchvision.transforms.v2.functional import center_crop, resize

    if interpolation not in _MODES:
        raise ValueError(f"interpolation {interpolation}: choose one of {', '.join(_MODES)}")
    mode = InterpolationMode.BICUBIC if interpolation == "bicubic" else InterpolationMode.BILINEAR
    decoder = decoder_for(str(torch.device(device)))
    target = decoder.device

    def finish(images: list[torch.Tensor]) -> torch.Tensor:
        mean_t = torch.tensor(mean, device=target).view(3, 1, 1)
        std_t = torch.tensor(std, device=target).view(3, 1, 1)
        out = []
        for image in images:
            image = resize(image.float().div_(255.0), [size], interpolation=mode, antialias=antialias)
            out.append((center_crop(image, [size, size]) - mean_t) / std_t)
        return torch.stack(out)

    return decoder.run(blobs, finish)
