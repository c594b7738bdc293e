"""VOLO's DALI loader (``--loader dali``), on DALI's CPU operators: the batches it gives the training
loop, token labels cropped with their images, each rank's share of the data, timm's RandAugment
rebuilt in DALI, and the trainer's switch (the run's summary, the one-line refusal without DALI)."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import ROOT

torch = pytest.importorskip("torch")
pytest.importorskip("timm")
if importlib.util.find_spec("nvidia.dali") is None:
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        pytest.fail("NVIDIA DALI is missing: CI installs it with the dev extra", pytrace=False)
    pytest.skip("NVIDIA DALI is not installed (pip install -e '.[dev]')", allow_module_level=True)

from nvidia.dali import fn, pipeline_def, types  # noqa: E402
from PIL import Image  # noqa: E402
from timm.data.auto_augment import _RAND_INCREASING_TRANSFORMS, AugmentOp  # noqa: E402

from reprokit_trainers.common.data import imagenet  # noqa: E402
from reprokit_trainers.volo import dali, run_volo, tokenlabel  # noqa: E402

TINY = '{"layers": [1, 1, 1, 1], "embed_dims": [32, 64, 64, 64], "num_heads": [1, 2, 2, 2], "stem_hidden_dim": 16}'
GRID = 8  # label-map cells per side in the position-coded data set


def synthetic_dataset(num_samples: int, num_classes: int = 1000) -> imagenet.ImageTrainDataset:
    """Small real JPEGs and [2, 5, 18, 18] label maps, encoded for the DALI loader; with 1000 classes
    and fewer samples, every sample's label is its own."""
    source = imagenet.SyntheticImageSource(num_samples, num_classes, (48, 64), (40, 56), pool_size=4)
    maps = tokenlabel.LabelMaps(None, num_classes, 18)
    transform = imagenet.TrainTransform(32, auto_augment=None)
    return imagenet.ImageTrainDataset(
        source,
        transform,
        encoded=True,
        extra=lambda index, crop: {"label_map": maps.load(index, source.key(index), source.label(index))},
    )


def position_coded_folder(root) -> tuple[str, str]:
    """An ImageNet folder of PNGs whose red and green channels are each pixel's x and y (as fractions
    of the image), blue its class; and the token-label files beside it, whose top class at map cell
    (r, c) of an image of class k is k * GRID^2 + r * GRID + c. A crop of the image and the same crop
    of its map must then tell the same place, and the same class."""
    sizes = [(160, 120), (120, 160), (200, 100), (96, 96)]
    for label, wnid in enumerate(("n01440764", "n01443537", "n01484850")):
        (root / "train" / wnid).mkdir(parents=True)
        (root / "labels" / wnid).mkdir(parents=True)
        for k, (width, height) in enumerate(sizes):
            x = (np.arange(width) + 0.5) / width
            y = (np.arange(height) + 0.5) / height
            pixels = np.zeros((height, width, 3), dtype=np.uint8)
            pixels[..., 0] = np.round(255 * x)[None, :]
            pixels[..., 1] = np.round(255 * y)[:, None]
            pixels[..., 2] = 80 * label
            Image.fromarray(pixels).save(root / "train" / wnid / f"{wnid}_{k}.png")
            cells = label * GRID * GRID + np.arange(GRID * GRID).reshape(GRID, GRID)
            label_map = torch.zeros(2, 5, GRID, GRID)
            label_map[0, 0] = 10.0  # the top-1 score; the other four ids score 0
            label_map[1] = torch.from_numpy(np.stack([(cells + j * 7) % (3 * GRID * GRID) for j in range(5)]))
            torch.save(label_map.half(), root / "labels" / wnid / f"{wnid}_{k}.pt")
    return str(root / "train"), str(root / "labels")


# ----------------------------------------------------------------------------------------------
# The batches


def test_batches_have_the_torch_loaders_structure_shapes_and_ranges():
    data_args = run_volo.DataArguments(
        loader="dali",
        synthetic_data=True,
        synthetic_num_train=24,
        synthetic_num_classes=1000,
        synthetic_image_width=[48, 64],
        synthetic_image_height=[40, 56],
        synthetic_pool_size=4,
        dataloader_num_workers=1,
    )
    loader, info = run_volo.build_data(data_args, img_size=32, label_size=2, batch_size=4, seed=0)
    assert len(loader) == 6  # full batches per epoch, as the torch loader counts them
    assert info["dali_version"] == dali.VERSION and info["dali_device"] == "cpu"
    batches = list(loader)
    assert len(batches) == 6
    batch = batches[0]
    assert set(batch) == {"pixel_values", "crop_box", "flipped", "labels", "label_map"}
    assert batch["pixel_values"].shape == (4, 3, 32, 32) and batch["pixel_values"].dtype == torch.uint8
    assert batch["crop_box"].shape == (4, 4) and batch["crop_box"].dtype == torch.float32
    assert batch["flipped"].dtype == torch.bool and batch["labels"].dtype == torch.int64
    assert batch["label_map"].shape == (4, 2, 5, 18, 18)
    boxes = torch.cat([b["crop_box"] for b in batches])
    assert (boxes >= 0).all() and (boxes <= 1).all()
    assert (boxes[:, 2] > boxes[:, 0]).all() and (boxes[:, 3] > boxes[:, 1]).all()
    images = torch.cat([b["pixel_values"] for b in batches]).float()
    assert images.std() > 20  # textured crops, not blank ones
    # The published augmentation is on, and the summary will say how DALI's differs from timm's.
    assert loader.departures == [dali.RandAugmentSpec.parse("rand-m9-mstd0.5-inc1").departure]


def test_token_labels_are_cropped_and_flipped_with_their_images(tmp_path):
    data_dir, labels_dir = position_coded_folder(tmp_path)
    num_classes, size, tokens = 3 * GRID * GRID, 64, 4
    data_args = run_volo.DataArguments(
        loader="dali",
        data_dir=data_dir,
        token_label_data=labels_dir,
        auto_augment="",  # RandAugment would move the pixels this test reads positions from
        train_interpolation="bilinear",
        dataloader_num_workers=0,
    )
    loader, _ = run_volo.build_data(data_args, img_size=size, label_size=tokens, batch_size=4, seed=3)
    seen_flips = set()
    for _ in range(3):  # three epochs of twelve images: new crops and flips each time
        for batch in loader:
            targets = tokenlabel.build_token_targets(
                *tokenlabel.batch_maps(batch),
                num_classes,
                tokens,
                0.0,
                box="corrected",  # the image's own geometry (the published box swaps x and y)
            )
            top = targets.dense.argmax(-1)  # [B, tokens^2]: the map cell each token's target comes from
            patch = size // tokens
            pixels = batch["pixel_values"].float().view(-1, 3, tokens, patch, tokens, patch).mean((3, 5))
            x_image, y_image = pixels[:, 0].flatten(1) / 255, pixels[:, 1].flatten(1) / 255
            x_map = (top % GRID + 0.5) / GRID
            y_map = (top % (GRID * GRID) // GRID + 0.5) / GRID
            # The same place, within the one map cell a token's center may share with its neighbour.
            assert (x_image - x_map).abs().max() <= 1.05 / GRID
            assert (y_image - y_map).abs().max() <= 1.05 / GRID
            # And the same image: its class in the map, in the pixels' blue and in the labels.
            assert (top // (GRID * GRID) == batch["labels"].view(-1, 1)).all()
            blue = batch["pixel_values"][:, 2].float().mean((1, 2))
            assert torch.equal((blue / 80).round().long(), batch["labels"])
            seen_flips |= set(batch["flipped"].tolist())
    assert seen_flips == {False, True}


def test_each_rank_reads_its_own_share_reshuffled_every_epoch():
    dataset = synthetic_dataset(24)
    labels = [dataset.source.label(i) for i in range(24)]
    shares = {}
    for rank in (0, 1):
        loader = dali.DaliLoader(dataset, 4, img_size=32, shard_id=rank, num_shards=2, seed=5)
        assert len(loader) == 3
        for epoch in (0, 1):
            shares[rank, epoch] = [label for batch in loader for label in batch["labels"].tolist()]
            # The indices the torch loader's DistributedSampler gives this rank in this epoch.
            sampler = torch.utils.data.DistributedSampler(
                dataset, 2, rank, shuffle=True, seed=5, drop_last=True
            )
            sampler.set_epoch(epoch)
            assert shares[rank, epoch] == [labels[i] for i in sampler]
    for epoch in (0, 1):
        assert not set(shares[0, epoch]) & set(shares[1, epoch])
        assert sorted(shares[0, epoch] + shares[1, epoch]) == sorted(labels)
    assert shares[0, 0] != shares[0, 1]


# ----------------------------------------------------------------------------------------------
# RandAugment: timm's, rebuilt in DALI


def test_the_op_set_is_timms_increasing_set_in_its_order():
    assert list(dali.TIMM_INCREASING) == _RAND_INCREASING_TRANSFORMS


def test_the_published_augmentation_string_parses_and_others_are_refused_in_one_line():
    spec = dali.RandAugmentSpec.parse("rand-m9-mstd0.5-inc1")
    policy = spec.policy
    assert (policy.num_layers, policy.magnitude, policy.magnitude_std, policy.prob) == (2, 9.0, 0.5, 0.5)
    assert dali.RandAugmentSpec.parse("rand-m7-n3-mstd101-p0.3-inc1").policy.magnitude_std == float("inf")
    for text, why in [
        ("rand-m9-mstd0.5", "increasing op set"),
        ("rand-m9-tweights-inc1", "'tweights'"),
        ("rand-m9-mmax15-inc1", "'mmax15'"),
        ("original-mstd0.5", "rand-"),
    ]:
        with pytest.raises(ValueError, match=why) as refused:
            dali.RandAugmentSpec.parse(text)
        assert "\n" not in str(refused.value)


def photo() -> np.ndarray:
    from reprokit_trainers.common.data.synthetic import jpeg_bytes

    data = jpeg_bytes(120, 90, np.random.default_rng(0))
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def dali_ops(image: np.ndarray, level: float, negate: bool) -> dict[str, np.ndarray]:
    """Each op of the suite applied once to ``image`` at ``level``, by DALI on the CPU."""
    augment = dali.TimmRandAugment(dali.RandAugmentSpec.parse("rand-m9-inc1"), on_gpu=False)

    @pipeline_def(batch_size=1, num_threads=1, device_id=None)
    def each_op():
        x = fn.external_source(source=lambda: [image], batch=True, layout="HWC")
        shape = fn.cast(x.shape(), dtype=types.FLOAT)
        return tuple(augment.apply(x, shape, op, level, negate) for op in dali.TIMM_INCREASING)

    pipe = each_op()
    pipe.build()
    return {
        op: np.array(out[0]).astype(int) for op, out in zip(dali.TIMM_INCREASING, pipe.run(), strict=True)
    }


def timm_op(image: np.ndarray, op: str, level: float, negate: bool, monkeypatch) -> np.ndarray:
    # Bilinear, as DALI's warps; timm negates a magnitude when random.random() > 0.5.
    monkeypatch.setattr(random, "random", lambda: 0.9 if negate else 0.1)
    augment = AugmentOp(
        op, prob=1.0, magnitude=level, hparams={"img_mean": (124, 116, 104), "interpolation": 2}
    )
    out = np.asarray(augment(Image.fromarray(image))).astype(int)
    monkeypatch.undo()
    return out


@pytest.mark.parametrize(("level", "negate"), [(8.7, False), (4.2, True)])
def test_each_op_gives_timms_pixels_where_dali_can(level, negate, monkeypatch):
    image = photo()
    ours = dali_ops(image, level, negate)
    for op in dali.TIMM_INCREASING:
        diff = np.abs(ours[op] - timm_op(image, op, level, negate, monkeypatch))
        if op in ("Invert", "PosterizeIncreasing", "SolarizeIncreasing", "SolarizeAdd"):
            assert diff.max() == 0, op
        elif op in ("AutoContrast", "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing"):
            assert diff.max() <= 2, op  # DALI rounds where PIL truncates
        elif op == "SharpnessIncreasing":
            assert diff[1:-1, 1:-1].max() <= 2, op  # PIL leaves the one-pixel border unsharpened
        elif op != "Equalize":  # geometric: same motion, one gray fill for the per-channel mean
            assert diff.mean() < 4, op
            assert np.abs(ours[op] - timm_op(image, op, level, not negate, monkeypatch)).mean() > 10, op


def test_posterize_at_the_top_level_blanks_the_image_as_timm_did():
    """Level 10 keeps no bits (4 - int(10 / 10 * 4)): black, as timm with the Pillow of the time
    (Pillow 13 refuses posterize(0))."""
    assert dali_ops(photo(), 10.0, False)["PosterizeIncreasing"].max() == 0


@pytest.mark.parametrize(
    ("text", "low", "high"),
    [("rand-m9-n1-mstd0.5-inc1", 0.45, 0.65), ("rand-m9-n1-mstd0.5-p1.0-inc1", 0.0, 0.12)],
)
def test_each_op_is_skipped_with_probability_one_minus_p(text, low, high):
    """One op per image, applied with probability p (timm's default 0.5): that share of the images
    changes (fewer by the ops that leave full-range noise as it was: AutoContrast)."""
    image = np.random.default_rng(1).integers(0, 256, (24, 24, 3), dtype=np.uint8)
    augment = dali.TimmRandAugment(dali.RandAugmentSpec.parse(text), on_gpu=False)

    @pipeline_def(batch_size=400, num_threads=1, device_id=None, seed=7, enable_conditionals=True)
    def pipe():
        x = fn.external_source(source=lambda: [image] * 400, batch=True, layout="HWC")
        return augment(x, fn.cast(x.shape(), dtype=types.FLOAT))

    built = pipe()
    built.build()
    (out,) = built.run()
    untouched = np.mean([np.array_equal(np.array(sample), image) for sample in out])
    assert low <= untouched < high


# ----------------------------------------------------------------------------------------------
# The trainer's switch


@pytest.mark.slow
def test_a_volo_run_with_the_dali_loader_records_it_in_the_summary(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "reprokit_trainers.volo", "--output_dir", str(out), "--model_name_or_path",
         "volo_d1", "--img_size", "64", "--model_kwargs_json", TINY, "--synthetic_data",
         "--synthetic_num_train", "16", "--synthetic_pool_size", "4", "--per_device_train_batch_size", "2",
         "--dataloader_num_workers", "1", "--max_steps", "3", "--logging_steps", "1",
         "--throughput_warmup_steps", "1", "--amp", "no", "--loader", "dali"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["loader"] == "dali"
    assert summary["dali_device"] == "cpu" and summary["dali_version"] == dali.VERSION
    assert any(
        d["reason"].startswith("dali RandAugment differs from timm's") and d["kind"] == "throughput"
        for d in summary["departures"]
    )
    assert summary["steps_per_epoch"] == 8


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on machines without CUDA")
def test_a_gpu_pipeline_where_there_is_no_cuda_is_a_one_line_error():
    with pytest.raises(ValueError) as refused:
        dali.build_pipeline(
            lambda info: None,
            batch_size=2,
            img_size=32,
            device_id=0,
            num_threads=1,
            seed=0,
            rand_augment_spec=None,
        )
    message = str(refused.value)
    assert "\n" not in message
    assert (
        message.startswith("--loader dali: DALI cannot build its pipeline on GPU 0: ") and "CUDA" in message
    )


def test_without_dali_the_flag_is_refused_in_one_line(tmp_path, monkeypatch):
    import reprokit_trainers.volo

    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, "reprokit_trainers.volo.dali")
    monkeypatch.delattr(reprokit_trainers.volo, "dali")
    with pytest.raises(SystemExit) as stopped:
        run_volo.main(["--output_dir", str(tmp_path), "--loader", "dali", "--synthetic_data"])
    message = str(stopped.value.code)
    assert "\n" not in message
    assert message.startswith(
        "run_volo.py: error: --loader dali needs NVIDIA DALI: pip install nvidia-dali-cuda120"
    )
    assert not any(tmp_path.iterdir())  # nothing started


def test_a_jpeg_dali_cannot_decode_is_named_by_its_path(tmp_path):
    # Its header reads (the workers draw the crop from it), its body is cut: DALI fails on "sample #1"
    # of some batch; the trainer must say which file, as the torch loader does.
    from tests.fakes import tiny_imagenet, truncated_jpeg

    root = tiny_imagenet(tmp_path / "imagenet")
    cut = truncated_jpeg()
    for k in range(3):
        (root / "train" / "n01440764" / f"cut{k}.JPEG").write_bytes(cut)
    source = imagenet.ImageFolderSource(root)
    maps = tokenlabel.LabelMaps(None, 2, 18)
    dataset = imagenet.ImageTrainDataset(
        source,
        imagenet.TrainTransform(32, auto_augment=None),
        encoded=True,
        extra=lambda index, crop: {"label_map": maps.load(index, source.key(index), source.label(index))},
    )
    with pytest.raises(imagenet.BadImage) as caught:
        for _ in dali.DaliLoader(dataset, 2, img_size=32, seed=0):
            pass
    line = imagenet.BadImage.line(caught.value)
    assert line.startswith(f"bad image {root / 'train' / 'n01440764' / 'cut'}")
    assert line.endswith(": image file is truncated (1 bytes not processed); remove or replace the file")
