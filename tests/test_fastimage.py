"""The kit's image paths give the published script's tensors, to a stated tolerance."""

from __future__ import annotations

import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from reprokit_trainers.bridgetower.fastimage import (  # noqa: E402
    FastImageTransform,
    decode_batch_on_device,
    published_transform,
)
from reprokit_trainers.common.synthetic import jpeg_bytes  # noqa: E402

# torchvision 0.29 deprecates its JPEG decoder in favour of torchcodec; it is still the one to test.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# (width, height): landscape, portrait, square, and one large enough for a 1/2 draft decode.
SIZES = [(700, 500), (450, 800), (600, 600), (900, 760)]


@pytest.fixture(scope="module")
def jpegs():
    rng = np.random.default_rng(1)
    return [jpeg_bytes(w, h, rng) for w, h in SIZES]


@pytest.fixture(scope="module")
def published(jpegs):
    transform = published_transform(294)
    return [transform(j) for j in jpegs]


def test_published_path_gives_clip_normalized_294_crops(published):
    for tensor in published:
        assert tensor.shape == (3, 294, 294) and tensor.dtype == torch.float32
        # CLIP's range for 8-bit pixels is about [-1.79, 2.15]; bicubic may overshoot it a little.
        assert float(tensor.min()) > -2.0 and float(tensor.max()) < 2.4


def test_kit_path_equals_the_published_one_to_a_hundredth(jpegs, published):
    transform = FastImageTransform(294, draft=False)
    for data, expected in zip(jpegs, published, strict=True):
        got = transform(data)
        assert got.shape == expected.shape
        difference = (got - expected).abs()
        # Mean error below one 8-bit level (0.015 after CLIP's std): uint8 rounding, not geometry.
        assert float(difference.mean()) < 0.01
        assert float(difference.quantile(0.99)) < 0.05


def test_the_fast_path_stays_within_its_stated_tolerance(jpegs, published):
    """Reduced DCT decoding and area resampling low-pass differently from an antialiased bicubic:
    a few 8-bit levels on average, never more than 0.10 (~7 levels) on any image."""
    transform = FastImageTransform(294, draft=True)
    errors = [float((transform(d) - e).abs().mean()) for d, e in zip(jpegs, published, strict=True)]
    assert max(errors) < 0.10
    # Where no reduced decode applies, only the resampling filter differs: closer still.
    assert errors[0] < 0.05 and errors[1] < 0.05


def test_images_simplejpeg_cannot_decode_take_the_same_steps_through_pillow(jpegs, published):
    from PIL import Image

    exact = FastImageTransform(294, draft=False)
    fast = FastImageTransform(294, draft=True)
    for data, expected in zip(jpegs, published, strict=True):
        png = io.BytesIO()
        Image.open(io.BytesIO(data)).save(png, format="PNG")
        assert float((exact(png.getvalue()) - expected).abs().mean()) < 0.01
        assert float((fast(png.getvalue()) - expected).abs().mean()) < 0.10


def test_a_misaligned_crop_would_be_caught(jpegs, published):
    """The tolerance is tight enough to see a crop shifted by a few pixels."""
    shifted = torch.roll(published[0], shifts=3, dims=2)
    assert float((shifted - published[0]).abs().mean()) > 0.05


def test_device_decode_path_matches_on_the_cpu(jpegs, published):
    batch = decode_batch_on_device(jpegs, 294, "cpu")
    assert batch.shape == (len(jpegs), 3, 294, 294)
    for got, expected in zip(batch, published, strict=True):
        # torchvision's JPEG decoder upsamples chroma differently from PIL's: ~1.5 levels.
        assert float((got - expected).abs().mean()) < 0.03
