"""The GPU loaders' RandAugment: timm's policy and ops, on tensors, against timm's own PIL ops."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("timm")

from PIL import Image  # noqa: E402
from timm.data import auto_augment as timm_aa  # noqa: E402

from reprokit_trainers.common.data import randaugment as ra  # noqa: E402
from reprokit_trainers.common.data.synthetic import jpeg_bytes  # noqa: E402

FILL = (124, 116, 104)  # timm's img_mean for ImageNet's mean
HPARAMS = {"translate_const": 100, "img_mean": FILL}


@pytest.fixture(scope="module")
def images() -> list[Image.Image]:
    rng = np.random.default_rng(0)
    return [Image.open(io.BytesIO(jpeg_bytes(w, h, rng))).convert("RGB") for w, h in ((120, 90), (97, 131))]


def as_batch(image: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1).unsqueeze(0)


def timm_op(
    name: str, image: Image.Image, level: float, sign: int, bicubic: bool, monkeypatch
) -> torch.Tensor:
    """timm's op at a fixed magnitude: its random negation pinned to ``sign``."""
    monkeypatch.setattr(timm_aa.random, "random", lambda: 0.0 if sign > 0 else 1.0)
    level_to_arg = timm_aa.LEVEL_TO_ARG[name]
    args = level_to_arg(level, HPARAMS) if level_to_arg else ()
    resample = Image.Resampling.BICUBIC if bicubic else Image.Resampling.BILINEAR
    out = timm_aa.NAME_TO_OP[name](image, *args, fillcolor=FILL, resample=resample)
    return as_batch(out)[0]


def ours(name: str, image: Image.Image, level: float, sign: int, bicubic: bool) -> torch.Tensor:
    return ra.apply_op(
        name,
        as_batch(image),
        torch.tensor([level]),
        torch.tensor([float(sign)]),
        torch.tensor([bicubic]),
        FILL,
    )[0]


COLOR_OPS = sorted(set(ra.OPS + ra.INCREASING_OPS) - set(ra.GEOMETRIC))


@pytest.mark.parametrize("sign", [1, -1])
@pytest.mark.parametrize("name", COLOR_OPS)
def test_color_ops_match_timms_exactly(images, name, sign, monkeypatch):
    for image in images:
        for level in (3.0, 9.0):
            expected = timm_op(name, image, level, sign, False, monkeypatch)
            assert torch.equal(ours(name, image, level, sign, False), expected), (name, level)


@pytest.mark.parametrize("bicubic", [False, True], ids=["bilinear", "bicubic"])
@pytest.mark.parametrize("sign", [1, -1])
@pytest.mark.parametrize("name", ra.GEOMETRIC)
def test_geometric_ops_match_timms_after_the_same_affine(images, name, sign, bicubic, monkeypatch):
    for image in images:
        expected = timm_op(name, image, 9.0, sign, bicubic, monkeypatch).int()
        difference = (ours(name, image, 9.0, sign, bicubic).int() - expected).abs()
        # The same sample points, kernel and fill; rounding in the last bit leaves a pixel in hundreds a level off.
        assert difference.max() <= 1 and (difference > 0).float().mean() < 0.01, name


def test_posterize_at_magnitude_ten_keeps_no_bit():
    # timm asks for 0 bits there; Pillow 13 refuses, the publication's Pillow made the image black.
    image = torch.full((1, 3, 4, 4), 201, dtype=torch.uint8)
    out = ra.apply_op(
        "PosterizeIncreasing", image, torch.tensor([10.0]), torch.tensor([1.0]), torch.tensor([False]), FILL
    )
    assert not out.any()


def test_the_published_policy_string():
    policy = ra.parse_policy("rand-m9-mstd0.5-inc1")
    assert policy == ra.Policy(
        ops=ra.INCREASING_OPS, magnitude=9, num_layers=2, prob=0.5, magnitude_std=0.5, magnitude_max=10
    )
    assert len(policy.ops) == 15 and "PosterizeIncreasing" in policy.ops and "Posterize" not in policy.ops


def test_policy_sections_as_timm_reads_them():
    policy = ra.parse_policy("rand-m7-n3-p0.3-mstd101-mmax15")
    assert (policy.magnitude, policy.num_layers, policy.prob) == (7, 3, 0.3)
    assert policy.magnitude_std == math.inf and policy.magnitude_max == 15  # mstd above 100: uniform
    assert policy.ops == ra.OPS  # without inc, timm's original op set
    assert ra.parse_policy("rand") == ra.Policy()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("augmix-m5-w3", "RandAugment policies (rand-...) only"),
        ("v0", "RandAugment policies (rand-...) only"),
        ("rand-m9-tweights", "op sets other than timm's default"),
        ("rand-m9-w0", "unknown section 'w0'"),
        ("rand-m9-mstd", "cannot read the section 'mstd'"),
        ("rand-m9.5", "'m9.5' must be an integer"),
    ],
)
def test_what_the_gpu_loader_does_not_implement_is_refused(text, says):
    with pytest.raises(ValueError) as refused:
        ra.parse_policy(text)
    assert str(refused.value).startswith(f"--auto_augment {text}: ") and says in str(refused.value)


def test_each_op_applies_with_its_probability():
    images = torch.zeros(2000, 3, 2, 2, dtype=torch.uint8)
    once = ra.DeviceRandAugment(ra.Policy(ops=("Invert",), num_layers=1, prob=0.5), FILL, seed=0)(images)
    inverted = (once == 255).flatten(1).all(dim=1).float().mean().item()
    assert 0.45 < inverted < 0.55
    assert images.eq(0).all()  # the caller's batch is left alone
    twice = ra.DeviceRandAugment(ra.Policy(ops=("Invert",), num_layers=2, prob=1.0), FILL)(images)
    assert torch.equal(twice, images)


def test_magnitudes_are_drawn_around_m_and_clipped_to_mmax():
    sampler = ra.DeviceRandAugment(ra.parse_policy("rand-m9-mstd0.5-inc1"), FILL, seed=0)
    levels = sampler._magnitudes(20000)
    assert levels.max() == 10.0 and levels.min() > 6.5
    assert abs(levels.mean().item() - 9.0) < 0.02
    assert 0.015 < (levels == 10.0).float().mean().item() < 0.03  # P(N(9, 0.5) >= 10) = 2.3%
    uniform = ra.DeviceRandAugment(ra.parse_policy("rand-m8-mstd101"), FILL, seed=0)._magnitudes(20000)
    assert uniform.min() >= 0 and uniform.max() <= 8 and abs(uniform.mean().item() - 4) < 0.1


def test_ops_are_drawn_from_the_whole_set_and_each_keeps_the_image_shape(images, monkeypatch):
    batch = torch.cat([as_batch(images[0])] * 64)
    seen = []
    original = ra.apply_op

    def spy(name, *args, **kwargs):
        seen.append(name)
        out = original(name, *args, **kwargs)
        assert out.shape == args[0].shape and out.dtype == torch.uint8
        return out

    monkeypatch.setattr(ra, "apply_op", spy)
    sampler = ra.DeviceRandAugment(ra.parse_policy("rand-m9-mstd0.5-inc1"), FILL, seed=1)
    for _ in range(3):
        sampler(batch)
    assert set(seen) == set(ra.INCREASING_OPS)
