"""The shared device decoder, exercised on the CPU (torchvision's libjpeg decoder in nvJPEG's place):
its per-image fallback for what nvJPEG cannot decode, its resizes, and its stream guard."""

from __future__ import annotations

import io
from contextlib import nullcontext

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torchvision 0.29 on its decoders
pytest.importorskip("torchvision")

from PIL import Image  # noqa: E402

from reprokit_trainers.common.data import gpudecode  # noqa: E402
from reprokit_trainers.common.data.imagenet import ImageFolderSource  # noqa: E402
from reprokit_trainers.common.data.synthetic import jpeg_bytes  # noqa: E402


def encoded(image: Image.Image, fmt: str = "JPEG", **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def photo() -> Image.Image:
    return Image.open(io.BytesIO(jpeg_bytes(120, 90, np.random.default_rng(0)))).convert("RGB")


@pytest.fixture
def imagenet_oddities(tmp_path, photo):
    """A class folder as ImageNet's train split has it: a JPEG, a PNG named .JPEG, a CMYK JPEG."""
    folder = tmp_path / "train" / "n02105855"
    folder.mkdir(parents=True)
    (folder / "n02105855_1.JPEG").write_bytes(encoded(photo, quality=95))
    (folder / "n02105855_2117.JPEG").write_bytes(encoded(photo, "PNG"))
    (folder / "n02105855_3.JPEG").write_bytes(encoded(photo.convert("CMYK"), quality=95))
    return ImageFolderSource(tmp_path)


def test_the_frame_header_says_what_nvjpeg_can_decode(photo):
    assert gpudecode.jpeg_components(encoded(photo)) == 3
    assert gpudecode.jpeg_components(encoded(photo, progressive=True)) == 3
    assert gpudecode.jpeg_components(encoded(photo.convert("L"))) == 1
    assert gpudecode.jpeg_components(encoded(photo.convert("CMYK"))) == 4
    assert gpudecode.jpeg_components(encoded(photo, "PNG")) is None
    assert gpudecode.jpeg_components(b"\xff\xd8\xff") is None  # truncated
    assert [gpudecode.nvjpeg_decodable(encoded(photo.convert(m))) for m in ("RGB", "L", "CMYK")] == [
        True,
        True,
        False,
    ]


def test_what_nvjpeg_cannot_decode_is_decoded_by_pillow_and_counted(imagenet_oddities):
    source = imagenet_oddities
    blobs = [source.read(i) for i in range(len(source))]
    decoder = gpudecode.DeviceDecoder("cpu")
    images = decoder.decode([torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs])
    assert decoder.cpu_fallbacks == 2  # the PNG and the CMYK JPEG; the plain JPEG went to the decoder
    for blob, image in zip(blobs, images, strict=True):
        expected = np.asarray(Image.open(io.BytesIO(blob)).convert("RGB"))
        assert image.dtype == torch.uint8 and tuple(image.shape) == (3, 90, 120)
        assert np.abs(image.permute(1, 2, 0).numpy().astype(int) - expected.astype(int)).mean() < 1.0
    decoder.decode(blobs)
    assert decoder.cpu_fallbacks == 4  # counted per image, every time


def test_an_image_the_decoder_refuses_falls_back_alone(photo, monkeypatch):
    import torchvision.io

    refused = encoded(photo, quality=80)
    fine = encoded(photo, quality=95)
    real = torchvision.io.decode_jpeg

    def picky(data, **kwargs):
        batch = data if isinstance(data, list) else [data]
        if any(t.numpy().tobytes() == refused for t in batch):
            raise RuntimeError("nvjpegDecode failed")  # as nvJPEG fails a whole batch for one image
        return real(data, **kwargs)

    monkeypatch.setattr(torchvision.io, "decode_jpeg", picky)
    decoder = gpudecode.DeviceDecoder("cpu")
    images = decoder.decode([fine, refused, fine])
    assert decoder.cpu_fallbacks == 1 and len(images) == 3
    assert torch.equal(images[1], gpudecode.pil_decode(refused))


def test_bridgetowers_float_path_is_the_published_bicubic_resize_without_antialias(photo):
    from torchvision.transforms import CenterCrop, InterpolationMode, Normalize, Resize
    from torchvision.transforms.functional import to_tensor

    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    data = [encoded(photo, quality=95), encoded(photo.resize((70, 100)), quality=95)]

    def published(antialias: bool, mode: InterpolationMode) -> torch.nn.Module:
        return torch.nn.Sequential(
            Resize([48], interpolation=mode, antialias=antialias), CenterCrop(48), Normalize(mean, std)
        )

    got = gpudecode.decode_resize_center_crop(
        data, 48, "cpu", mean, std, interpolation="bicubic", antialias=False
    )
    assert got.shape == (2, 3, 48, 48) and got.dtype == torch.float32
    for image, blob in zip(got, data, strict=True):
        pixels = to_tensor(Image.open(io.BytesIO(blob)).convert("RGB"))
        assert (image - published(False, InterpolationMode.BICUBIC)(pixels)).abs().mean() < 0.01
        # The comparison can tell the interpolation and the antialiasing apart.
        assert (image - published(True, InterpolationMode.BICUBIC)(pixels)).abs().mean() > 0.03
        assert (image - published(False, InterpolationMode.BILINEAR)(pixels)).abs().mean() > 0.01


def test_an_unknown_interpolation_is_refused(photo):
    image = gpudecode.pil_decode(encoded(photo))
    with pytest.raises(ValueError, match="interpolation lanczos: choose one of bilinear, bicubic"):
        gpudecode.resized_crop(image, (0, 0, 10, 10), 8, "lanczos")


class FakeStream:
    """Stands in for torch.cuda.Stream (there is no CUDA here): records what the guard asks of it."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def synchronize(self) -> None:
        self.events.append("decode stream synchronized")

    def wait_stream(self, other) -> None:
        self.events.append("training stream waits for the decode stream")


class FakeTensor:
    def __init__(self, events: list[str]) -> None:
        self.events = events

    def record_stream(self, stream) -> None:
        self.events.append("result recorded on the training stream")


def test_the_decode_stream_is_synchronized_before_every_decode(photo, monkeypatch):
    # torchvision's CUDA decode_jpeg allocates on the current stream and writes from its own
    # (pytorch/vision#9606): the decoder must make its stream idle before each decode.
    events: list[str] = []
    guard = object.__new__(gpudecode._DecodeStream)
    guard.device, guard.stream = torch.device("cuda", 0), FakeStream(events)
    monkeypatch.setattr(
        torch.cuda, "stream", lambda s: events.append("decode stream current") or nullcontext()
    )
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: FakeStream(events))
    decoder = gpudecode.DeviceDecoder("cpu")
    decoder.streams = guard
    real_decode = decoder.decode
    monkeypatch.setattr(decoder, "decode", lambda blobs: events.append("decode") or real_decode(blobs))

    def finish(images):
        events.append("finish")
        return FakeTensor(events)

    for _ in range(2):
        decoder.run([encoded(photo)], finish)
    once = [
        "decode stream synchronized",
        "decode stream current",
        "decode",
        "finish",
        "training stream waits for the decode stream",
        "result recorded on the training stream",
    ]
    assert events == once + once
