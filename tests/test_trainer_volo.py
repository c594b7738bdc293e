"""The VOLO trainer: MixToken, token-label targets and loss, and pretrain -> finetune on the CPU."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import ROOT, departures_of_the_run

torch = pytest.importorskip("torch")
pytest.importorskip("timm")

from PIL import Image  # noqa: E402

from reprokit_trainers.common.data import imagenet  # noqa: E402
from reprokit_trainers.volo import record, run_volo, tokenlabel  # noqa: E402
from reprokit_trainers.volo.tokenlabel import TokenTargets  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")

TINY = {
    "layers": [1, 1, 1, 1],
    "embed_dims": [32, 64, 64, 64],
    "num_heads": [1, 2, 2, 2],
    "stem_hidden_dim": 16,
}
TRAINER = ["-m", "reprokit_trainers.volo"]  # run from ROOT, as a user would


def tiny_volo(img_size: int = 64, num_classes: int = 10) -> torch.nn.Module:
    args = run_volo.ModelArguments(
        model_name_or_path="volo_d1", model_kwargs_json=json.dumps(TINY), num_classes=num_classes
    )
    model, _ = run_volo.build_model(args, img_size)
    return model


def seed_for_partial_box(grid: int) -> int:
    """A seed whose first MixToken box covers some but not all tokens."""
    for seed in range(1000):
        area = tokenlabel.box_area(tokenlabel.sample_token_box(grid, grid, np.random.default_rng(seed)))
        if 0 < area < grid * grid:
            return seed
    raise AssertionError("no partial box in 1000 seeds")


# ----------------------------------------------------------------------------------------------
# MixToken


def test_mixtoken_takes_the_box_from_the_flipped_batch_and_unmixes_the_token_outputs():
    torch.manual_seed(0)
    model = tiny_volo(64)  # token grid 4 x 4; the features it mixes are 8 x 8
    seed = seed_for_partial_box(4)
    forward = tokenlabel.MixTokenForward(model, mix_token=True, seed=seed).train()
    seen = {}
    model.patch_embed.register_forward_hook(
        lambda m, i, out: seen.__setitem__("embedded", out.permute(0, 2, 3, 1))
    )
    model.network[0].register_forward_pre_hook(lambda m, args: seen.__setitem__("mixed", args[0]))
    model.aux_head.register_forward_hook(lambda m, i, out: seen.__setitem__("dense_raw", out))

    images = torch.randn(4, 3, 64, 64)
    cls_logits, dense, box = forward(images)

    assert box == tokenlabel.sample_token_box(4, 4, np.random.default_rng(seed))
    assert cls_logits.shape == (4, 10) and dense.shape == (4, 16, 10)
    top, left, bottom, right = box
    inside = torch.zeros(8, 8, dtype=torch.bool)
    inside[2 * top : 2 * bottom, 2 * left : 2 * right] = True  # the token box on the 2x finer grid
    embedded, mixed = seen["embedded"], seen["mixed"]
    # Inside the box every image carries the features of its mirror in the batch; outside, its own.
    assert torch.equal(mixed[:, inside], embedded.flip(0)[:, inside])
    assert torch.equal(mixed[:, ~inside], embedded[:, ~inside])
    assert not torch.allclose(embedded[:, inside], embedded.flip(0)[:, inside])
    # The token logits are swapped back, so position (i, j) of image b is scored against b's labels.
    raw = seen["dense_raw"].view(4, 4, 4, 10)
    out = dense.view(4, 4, 4, 10)
    token_inside = torch.zeros(4, 4, dtype=torch.bool)
    token_inside[top:bottom, left:right] = True
    assert torch.equal(out[:, token_inside], raw.flip(0)[:, token_inside])
    assert torch.equal(out[:, ~token_inside], raw[:, ~token_inside])


def test_mixtoken_is_off_in_eval_and_when_disabled():
    model = tiny_volo(64)
    images = torch.randn(2, 3, 64, 64)
    assert tokenlabel.MixTokenForward(model, mix_token=False).train()(images)[2] == (0, 0, 0, 0)
    assert tokenlabel.MixTokenForward(model, mix_token=True).eval()(images)[2] == (0, 0, 0, 0)


def test_token_boxes_stay_on_the_grid_and_cover_about_a_third_of_it():
    rng = np.random.default_rng(0)
    fractions = []
    for _ in range(2000):
        top, left, bottom, right = tokenlabel.sample_token_box(14, 14, rng)
        assert 0 <= top <= bottom <= 14 and 0 <= left <= right <= 14
        fractions.append(tokenlabel.box_area((top, left, bottom, right)) / 196)
    # lam ~ Beta(1, 1): an unclipped box would cover 1/2 on average; borders and rounding clip it.
    assert 0.2 < float(np.mean(fractions)) < 0.45


def test_the_class_target_is_mixed_with_lam_one_minus_the_box_share():
    targets = TokenTargets(
        gt=torch.eye(3)[[0, 1]],
        cls=torch.tensor([[0.8, 0.1, 0.1], [0.1, 0.1, 0.8]]),
        dense=torch.full((2, 4, 3), 1 / 3),
    )
    cls_logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.0, 1.5]])
    dense_logits = torch.zeros(2, 4, 3)
    box = (0, 0, 1, 1)  # one token of four
    lam = tokenlabel.mixtoken_lambda(box, 4)
    assert lam == 0.75
    loss = tokenlabel.TokenLabelLoss(dense_weight=0.5, cls_weight=1.0)(cls_logits, dense_logits, box, targets)
    mixed = lam * targets.cls + (1 - lam) * targets.cls.flip(0)
    expected = -(mixed * torch.log_softmax(cls_logits, -1)).sum(-1).mean() + 0.5 * math.log(3)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


# ----------------------------------------------------------------------------------------------
# Token-label loss and targets


def test_token_label_loss_on_known_values():
    loss_fn = tokenlabel.TokenLabelLoss(dense_weight=0.5, cls_weight=1.0)
    # Uniform logits cost log(C) against any target distribution.
    targets = TokenTargets(
        gt=torch.eye(5)[[1, 2]],
        cls=torch.softmax(torch.randn(2, 5), -1),
        dense=torch.softmax(torch.randn(2, 9, 5), -1),
    )
    loss = loss_fn(torch.zeros(2, 5), torch.zeros(2, 9, 5), (0, 0, 0, 0), targets)
    assert loss.item() == pytest.approx(1.5 * math.log(5), rel=1e-6)
    # Two classes, logits (0, ln 3) -> probabilities (1/4, 3/4).
    logits = torch.tensor([[0.0, math.log(3)]])
    onehot_0, onehot_1 = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])
    targets = TokenTargets(gt=onehot_0, cls=onehot_0, dense=onehot_1.view(1, 1, 2))
    loss = loss_fn(logits, logits.view(1, 1, 2), (0, 0, 0, 0), targets)
    assert loss.item() == pytest.approx(math.log(4) + 0.5 * math.log(4 / 3), rel=1e-6)


def test_ground_truth_blends_the_label_into_the_class_target():
    loss_fn = tokenlabel.TokenLabelLoss(dense_weight=0.0, cls_weight=1.0, ground_truth=True)
    logits = torch.tensor([[0.0, math.log(3)], [0.0, math.log(3)]])
    dense = torch.zeros(2, 1, 2)
    # Image 0: token label agrees with the label (class 1) -> half and half; image 1 disagrees -> 90/10.
    targets = TokenTargets(
        gt=torch.tensor([[0.0, 1.0], [1.0, 0.0]]),
        cls=torch.tensor([[0.2, 0.8], [0.3, 0.7]]),
        dense=torch.full((2, 1, 2), 0.5),
    )
    loss = loss_fn(logits, dense, (0, 0, 0, 0), targets)
    blended = torch.tensor([[0.1, 0.9], [0.1 * 1.0 + 0.9 * 0.3, 0.9 * 0.7]])
    expected = -(blended * torch.log(torch.tensor([[0.25, 0.75]]))).sum(-1).mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


def halves_label_map(size: int = 18) -> torch.Tensor:
    """Top-1 class 3 on the left half of the image, class 7 on the right, both strongly scored."""
    maps = torch.zeros(2, 5, size, size)
    maps[0, 0] = 20.0
    maps[1, 0, :, : size // 2] = 3
    maps[1, 0, :, size // 2 :] = 7
    maps[1, 1:] = torch.tensor([0.0, 1.0, 2.0, 9.0]).view(4, 1, 1)  # the other top-5 ids, low scores
    return maps.half()


def test_targets_are_the_label_map_cropped_and_flipped_like_the_image():
    maps = torch.stack([halves_label_map()] * 3)
    boxes = torch.tensor([[0.0, 0.0, 0.4, 1.0], [0.6, 0.2, 1.0, 0.8], [0.0, 0.0, 0.4, 1.0]])
    flipped = torch.tensor([False, False, True])
    targets = tokenlabel.build_token_targets(
        maps,
        boxes,
        flipped,
        torch.tensor([3, 7, 3]),
        10,
        label_size=14,
        smoothing=0.1,
        box="corrected",
        smoothing_form="convex",
    )
    assert (
        targets.dense.shape == (3, 196, 10) and targets.cls.shape == (3, 10) and targets.gt.shape == (3, 10)
    )
    for t in (targets.gt, targets.cls, targets.dense):
        assert torch.allclose(t.sum(-1), torch.ones(t.shape[:-1]), atol=1e-5)
    # A crop of the left half is class 3 everywhere; of the right half, class 7; the left half of
    # the flipped image is the original's right half.
    assert (targets.dense[0].argmax(-1) == 3).all() and targets.cls[0].argmax() == 3
    assert (targets.dense[1].argmax(-1) == 7).all() and targets.cls[1].argmax() == 7
    assert (targets.dense[2].argmax(-1) == 7).all() and targets.cls[2].argmax() == 7
    # Label smoothing 0.1 over 10 classes: the image label's one-hot becomes 0.91 / 0.01.
    assert targets.gt[0, 3].item() == pytest.approx(0.91) and targets.gt[0, 0].item() == pytest.approx(0.01)


def test_a_box_across_the_border_splits_the_token_labels():
    maps = halves_label_map().unsqueeze(0)
    targets = tokenlabel.build_token_targets(
        maps,
        torch.tensor([[0.25, 0.0, 0.75, 1.0]]),
        torch.tensor([False]),
        torch.tensor([3]),
        10,
        label_size=4,
        box="corrected",
    )
    grid = targets.dense[0].argmax(-1).view(4, 4)
    assert (grid[:, :2] == 3).all() and (grid[:, 2:] == 7).all()


def test_the_published_box_crops_the_label_map_with_x_and_y_swapped():
    # The top 40% of the image, full width: the left half is class 3, the right half class 7.
    maps, box = halves_label_map().unsqueeze(0), torch.tensor([[0.0, 0.0, 1.0, 0.4]])
    args = (maps, box, torch.tensor([False]), torch.tensor([3]), 10)
    corrected = (
        tokenlabel.build_token_targets(*args, label_size=4, box="corrected").dense[0].argmax(-1).view(4, 4)
    )
    published = tokenlabel.build_token_targets(*args, label_size=4).dense[0].argmax(-1).view(4, 4)
    assert (corrected[:, :2] == 3).all() and (corrected[:, 2:] == 7).all()
    # The toolbox hands RoIAlign (top, left, bottom, right) as (x1, y1, x2, y2): the left 40%, all rows.
    assert (published == 3).all()


def test_the_published_smoothing_adds_s_over_c_to_a_smoothed_distribution():
    maps = halves_label_map().unsqueeze(0)
    args = (maps, torch.tensor([[0.0, 0.0, 1.0, 1.0]]), torch.tensor([False]), torch.tensor([3]), 10)
    published = tokenlabel.build_token_targets(*args, label_size=2, smoothing=0.1)
    convex = tokenlabel.build_token_targets(*args, label_size=2, smoothing=0.1, smoothing_form="convex")
    # p (1 - s + s/C) + s/C: the one-hot formula on a soft target sums to 1 + s/C, not 1.
    assert torch.allclose(published.dense.sum(-1), torch.full((1, 4), 1.01))
    assert torch.allclose(convex.dense.sum(-1), torch.ones(1, 4))
    assert torch.allclose(published.dense - convex.dense, convex.dense.sub(0.01).div(0.9) * 0.01, atol=1e-6)


def test_token_label_size_must_be_the_token_grid():
    for img_size, size in ((224, 14), (384, 24), (448, 28), (512, 32)):
        tokenlabel.check_token_label_size(img_size, size)
    with pytest.raises(ValueError, match=r"token_label_size 24 does not match img_size 512.* = 32"):
        tokenlabel.check_token_label_size(512, 24)


def test_a_mismatched_token_label_size_stops_the_trainer_with_one_line(tmp_path):
    with pytest.raises(SystemExit) as stopped:
        run_volo.main(
            ["--output_dir", str(tmp_path), "--model_name_or_path", "volo_d5_512", "--token_label_size", "24"]
        )
    message = str(stopped.value.code)
    assert "\n" not in message
    assert message.startswith("run_volo.py: error: token_label_size 24 does not match img_size 512")
    assert not any(tmp_path.iterdir())  # nothing started


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on machines without CUDA")
def test_gpu_decode_without_a_gpu_is_a_one_line_error(tmp_path):
    with pytest.raises(SystemExit) as stopped:
        run_volo.main(["--output_dir", str(tmp_path), "--loader", "gpu_decode"])
    message = str(stopped.value.code)
    assert "\n" not in message and "gpu_decode" in message and "CUDA" in message


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--auto_augment", "augmix-m5-w3", "RandAugment policies (rand-...) only"),
        ("--auto_augment", "rand-m9-tweights", "op sets other than timm's default"),
        ("--auto_augment", "rand-m9-x3", "unknown section 'x3'"),
        ("--train_interpolation", "nearest", "must be one of random, bilinear, bicubic"),
    ],
)
def test_augmentation_the_loaders_do_not_implement_is_one_line_and_no_run(tmp_path, flag, value, says):
    with pytest.raises(SystemExit) as stopped:
        run_volo.main(["--output_dir", str(tmp_path / "run"), flag, value])
    message = str(stopped.value.code)
    assert message.startswith("run_volo.py: error: ") and "\n" not in message and says in message
    assert not (tmp_path / "run").exists()


def test_the_published_policy_posterizes_to_black_at_magnitude_ten():
    # timm's PosterizeIncreasing keeps 0 bits at magnitude 10 (1 draw in 44 of N(9, 0.5)); Pillow 13
    # raises on that, which would end a run in a loader worker. The publication's Pillow made it black.
    transform = imagenet.TrainTransform(64, auto_augment="rand-m10-p1.0-inc1")
    posterize = next(op for op in transform.rand_augment.ops if op.name == "PosterizeIncreasing")
    image = Image.fromarray(np.full((20, 30, 3), 200, dtype=np.uint8))
    assert not np.asarray(posterize(image)).any()


def test_a_finetune_from_the_kits_short_pretraining_is_a_departure():
    short = {"steps": 500, "schedule_completed": False, "data": "imagenet-folder"}
    assert record.pretraining_departure(short) == (
        "finetuned from weights pretrained for 500 steps, not the published pretrained weights"
    )
    synthetic = {"steps": 10, "schedule_completed": True, "data": "synthetic"}
    assert "on synthetic data" in record.pretraining_departure(synthetic)
    # A full pretraining on ImageNet, or weights from elsewhere (sail-sg/volo's release): as published.
    assert (
        record.pretraining_departure({"steps": 9, "schedule_completed": True, "data": "imagenet-folder"})
        is None
    )
    assert record.pretraining_departure(None) is None


def encoded_batch(image: np.ndarray, n: int, hflip: float = 0.5, seed: int = 0) -> dict:
    """What the gpu_decode loader's workers ship: JPEG bytes, a crop box and a flip per sample."""
    import io
    import random

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=95)

    class OneImage:
        num_classes = 1

        def __len__(self) -> int:
            return n

        def read(self, index: int) -> bytes:
            return buffer.getvalue()

        def label(self, index: int) -> int:
            return 0

        def describe(self, index: int) -> str:
            return f"image {index}"

    random.seed(seed)
    torch.manual_seed(seed)
    transform = imagenet.TrainTransform(32, auto_augment=None, hflip=hflip, scale=(0.3, 1.0))
    dataset = imagenet.ImageTrainDataset(OneImage(), transform, encoded=True)
    return imagenet.collate([dataset[i] for i in range(n)])


def photo(seed: int = 0) -> np.ndarray:
    from reprokit_trainers.common.data.synthetic import jpeg_bytes

    data = jpeg_bytes(150, 110, np.random.default_rng(seed))
    return np.asarray(Image.open(__import__("io").BytesIO(data)).convert("RGB"))


def test_the_gpu_loader_resizes_its_crops_as_the_cpu_path_does():
    # Bicubic, antialiased: the crop Pillow's resize makes (timm's RandomResizedCrop), to a level.
    image = photo()
    batch = encoded_batch(image, 8)
    crops = imagenet.GpuDecode(32, torch.device("cpu"), auto_augment=None, interpolation="bicubic")(
        batch["jpeg"], batch["crop_box"], batch["flipped"], batch["source"]
    )
    decoded = Image.open(__import__("io").BytesIO(batch["jpeg"][0].numpy().tobytes())).convert("RGB")
    for crop, box, flip in zip(crops, batch["crop_box"].tolist(), batch["flipped"].tolist(), strict=True):
        source = decoded.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if flip else decoded
        w, h = source.size
        pixels = (round(box[0] * w), round(box[1] * h), round(box[2] * w), round(box[3] * h))
        expected = np.asarray(source.resize((32, 32), Image.Resampling.BICUBIC, box=pixels))
        difference = np.abs(crop.permute(1, 2, 0).numpy().astype(int) - expected.astype(int))
        # Without antialiasing the mean difference is ~9 levels; rounding at edges leaves a few pixels off.
        assert difference.mean() < 0.5 and difference.max() <= 16


def test_the_gpu_loader_applies_the_randaugment_policy_it_was_given():
    batch = encoded_batch(photo(1), 48)
    args = (batch["jpeg"], batch["crop_box"], batch["flipped"], batch["source"])
    plain = imagenet.GpuDecode(32, torch.device("cpu"), auto_augment=None, interpolation="bicubic")(*args)
    augmented = imagenet.GpuDecode(
        32, torch.device("cpu"), auto_augment="rand-m9-mstd0.5-inc1", interpolation="bicubic"
    )(*args)
    changed = (plain != augmented).flatten(1).any(dim=1).float().mean().item()
    # Two layers at probability 0.5: 3 images in 4 get at least one op (a few ops change nothing here).
    assert 0.5 < changed < 0.95


def test_loss_decreases_when_overfitting_four_images():
    torch.manual_seed(0)
    model = tiny_volo(64, num_classes=10)
    forward = tokenlabel.MixTokenForward(model, mix_token=True, seed=0).train()
    images = torch.randn(4, 3, 64, 64)
    labels = torch.tensor([0, 3, 5, 9])
    maps = torch.stack([tokenlabel.synthetic_label_map(i, int(y), 10, 18) for i, y in enumerate(labels)])
    targets = tokenlabel.build_token_targets(
        maps,
        torch.tensor([[0.1, 0.1, 0.9, 0.9]] * 4),
        torch.zeros(4, dtype=torch.bool),
        labels,
        10,
        label_size=4,
    )
    loss_fn = tokenlabel.TokenLabelLoss()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.0)
    losses = []
    for _ in range(25):
        loss = loss_fn(*forward(images), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.3, losses


# ----------------------------------------------------------------------------------------------
# Model and data


def test_the_architecture_table_builds_timms_registered_models():
    from timm import create_model
    from timm.models.volo import VOLO

    for family, architecture in run_volo.ARCHITECTURES.items():
        with torch.device("meta"):
            ours = VOLO(img_size=224, **architecture)
            theirs = create_model(f"{family}_224")
        count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
        assert count(ours) == count(theirs), family
    assert run_volo.parse_model_name("volo_d5_512") == ("volo_d5", 512)
    assert run_volo.parse_model_name("volo_d3") == ("volo_d3", None)


def test_the_crop_box_is_in_the_flipped_images_coordinates():
    # Left half black, right half white: after the flip the left half is white.
    array = np.zeros((200, 300, 3), dtype=np.uint8)
    array[:, 150:] = 255
    image = Image.fromarray(array)
    transform = imagenet.TrainTransform(
        32, auto_augment=None, hflip=1.0, scale=(0.05, 0.1), interpolation="bilinear"
    )
    checked = 0
    for _ in range(50):
        crop, where = transform(image)
        assert crop.dtype == torch.uint8 and crop.shape == (3, 32, 32) and where.flipped
        x0, _, x1, _ = where.box
        if x1 < 0.5:
            assert crop.float().mean() > 250
            checked += 1
        elif x0 > 0.5:
            assert crop.float().mean() < 5
            checked += 1
    assert checked > 10


def test_synthetic_images_are_imagenet_sized_jpegs_with_labels():
    source = imagenet.SyntheticImageSource(100, num_classes=1000, pool_size=4, seed=0)
    assert len(source) == 100 and len(source.pool) == 4
    for index in range(6):
        image = Image.open(__import__("io").BytesIO(source.read(index)))
        assert image.format == "JPEG" and 375 <= image.size[0] <= 500 and 333 <= image.size[1] <= 500
        assert 0 <= source.label(index) < 1000
    assert len({source.label(i) for i in range(100)}) == 100


# ----------------------------------------------------------------------------------------------
# End to end, as the kit runs it


def train(out, *args: str, launcher: list[str] | None = None) -> dict:
    """A few steps of a tiny VOLO into ``out``: under ``launcher`` (torchrun) in processes of their own,
    else from main in this process, as test_conformance_loop.py runs each trainer's one-process loop (run_volo
    is imported here already; a new process is mostly importing torch and timm). `python -m
    reprokit_trainers.volo` itself is run in test_trainers_package.py."""
    argv = ["--output_dir", str(out), "--model_name_or_path", "volo_d1", "--model_kwargs_json", json.dumps(TINY),
            "--synthetic_data", "--synthetic_num_train", "32", "--synthetic_pool_size", "4",
            "--per_device_train_batch_size", "2", "--dataloader_num_workers", "1", "--max_steps", "4",
            "--logging_steps", "2", "--throughput_warmup_steps", "2", "--amp", "no", *args]  # fmt: skip
    if launcher:
        result = subprocess.run(
            [*launcher, *TRAINER, *argv],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            cwd=ROOT,
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    else:
        run_volo.main(argv)  # which ends by leaving the 1-rank group it joined
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["unit"] == "img/s" and summary["samples_per_second"] > 0
    rows = (out / "throughput.csv").read_text().splitlines()
    assert (
        rows[0].startswith("step,steps_total,epoch,elapsed_s,samples,samples_per_second") and len(rows) >= 3
    )
    # Every row says how many steps the run trains in all (here max_steps, short of the schedule).
    assert all(row.split(",")[1] == str(summary["steps"]) for row in rows[1:])
    assert list((out / "tensorboard" / "train").glob("events.out.tfevents.*"))
    assert (out / "sysinfo.json").exists()
    return summary


@pytest.mark.slow
def test_pretrain_then_finetune_at_a_higher_resolution(tmp_path):
    pretrain = train(tmp_path / "pretrain", "--img_size", "64", "--token_label_size", "4", "--lr", "1e-3")
    assert pretrain["token_label_size"] == 4 and pretrain["steps"] == 4
    # What the host judges by: the switches in effect, and why this run is not the publication's.
    assert pretrain["loader"] == "torch" and pretrain["torch_compile"] is False
    assert departures_of_the_run(pretrain) == [
        {"reason": "synthetic data", "kind": "throughput"},
        {"reason": "synthetic token labels (no NFNet-F6 label maps given)", "kind": "throughput"},
    ]
    # The kernels that ran, read back from the modules, the optimizer and DDP: the publication's.
    assert pretrain["software"] == {
        "attention": "math",
        "optimizer": "adamw-per-tensor",
        "ddp": "ddp-after-backward",
        "tf32": "not used (cpu)" if not torch.cuda.is_available() else pretrain["software"]["tf32"],
        "mixed_precision": "fp32",
        "data_path": "pil-workers",
        # main.py's loop: a wait every step, zero-filled gradients, the prefetcher's side stream
        # (inline on a CPU, which has none, and saying so).
        "host_sync": "every-step",
        "zero_grad": "zeros",
        "input_stream": "inline (cpu: no side stream)" if not torch.cuda.is_available() else "side-stream",
    }
    assert pretrain["ddp_buckets"] == 1 and pretrain["token_label_box"] == "toolbox"
    # Where the measured window went, and what energy it drew (or why that is unknown here).
    breakdown = pretrain["breakdown"]
    assert breakdown["data_wait"] >= 0 and breakdown["compute"] > 0
    assert breakdown["communication_timed"].startswith("DDP's reducer timers")
    assert abs(sum(breakdown[k] for k in ("data_wait", "compute", "communication", "other")) - 1) < 0.01
    energy = pretrain["energy"]
    assert (pretrain["energy_joules"] or 0) > 0 or energy.startswith("unavailable (")
    assert pretrain["throughput"]["after_warmup"]["value"] > 0
    assert pretrain["flops_per_sample"] > 0
    if not torch.cuda.is_available():  # no peak for a CPU, so no MFU
        assert pretrain["device_peak_tflops"] is None and pretrain["mfu"] is None
    checkpoint = tmp_path / "pretrain" / "checkpoint" / "model.pt"
    assert checkpoint.exists()

    # The kit hands the finetune the pretrain run's checkpoint folder.
    finetune = train(
        tmp_path / "finetune", "--img_size", "96", "--token_label_size", "6", "--finetune", str(checkpoint.parent),
        "--ground_truth", "--epochs", "30", "--warmup_epochs", "5", "--weight_decay", "1e-8",
    )  # fmt: skip
    assert finetune["pos_embed_resized"] == [[4, 4], [6, 6]]
    assert finetune["pretraining"] == {"steps": 4, "schedule_completed": False, "data": "synthetic"}
    # The weights a finetune starts from do not change its speed: shown beside the verdict, not blocking it.
    assert {
        "reason": "finetuned from weights pretrained for 4 steps on synthetic data, not the published pretrained weights",
        "kind": "quality",
    } in finetune["departures"]
    assert finetune["finetune_from"] == str(checkpoint) and finetune["token_label_size"] == 6
    # Counted for the model trained: the same tiny VOLO costs more per sample at the higher resolution.
    assert finetune["flops_per_sample"] > pretrain["flops_per_sample"]

    # The position embedding is the pretrained 4x4 grid, bicubically interpolated to 6x6.
    model = tiny_volo(96, num_classes=1000)
    run_volo.load_finetune(model, str(checkpoint))
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    old = state["pos_embed"]
    expected = torch.nn.functional.interpolate(old.permute(0, 3, 1, 2), size=(6, 6), mode="bicubic").permute(
        0, 2, 3, 1
    )
    assert torch.allclose(model.pos_embed, expected, atol=1e-6)
    assert torch.equal(model.head.weight, state["head.weight"])  # same classes: the head is kept


@pytest.mark.slow
def test_two_processes_train_with_ddp_on_gloo(tmp_path):
    launcher = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        "29561",
    ]
    summary = train(tmp_path / "ddp", "--img_size", "64", "--max_steps", "3", launcher=launcher)
    assert summary["world_size"] == 2 and summary["global_batch_size"] == 4
    assert summary["samples"] == 3 * 4
    # Apex's delay_allreduce, emulated: every gradient in one bucket, reduced once backward is done.
    assert summary["software"]["ddp"] == "ddp-after-backward" and summary["ddp_buckets"] == 1


@pytest.mark.slow
def test_kernels_beyond_the_publication_are_recorded_as_they_ran(tmp_path):
    summary = train(
        tmp_path / "beyond", "--img_size", "64", "--max_steps", "3", "--attention", "sdpa",
        "--optimizer_impl", "foreach", "--ddp_schedule", "overlap", "--token_label_box", "corrected",
    )  # fmt: skip
    software = summary["software"]
    # SDPA names the backend torch dispatched (flash on this CPU; efficient or cudnn on GPUs).
    assert software["attention"].startswith("sdpa") and software["optimizer"] == "adamw-foreach"
    # The tiny model's 1.4 MiB of gradients: DDP's 1 MiB first bucket, then the rest.
    assert software["ddp"] == "ddp-overlap" and summary["ddp_buckets"] == 2
    # The corrected box changes what the model learns, not the speed: beside the verdict.
    assert {
        "reason": "token-label crop box corrected, where the published runs used the toolbox's (x and y swapped)",
        "kind": "quality",
    } in summary["departures"]


# One refusal as a user's shell sees it (a new process: its last line, no traceback); the others from main
# in this process (a new one is mostly importing torch).
@pytest.mark.parametrize(
    "flag, value, where",
    [("--attention", "flash", "process"), ("--optimizer_impl", "apex_fused", "main"),
     ("--ddp_schedule", "delayed", "main")],
)  # fmt: skip
def test_a_kernel_the_trainer_does_not_have_is_one_line_and_no_run(tmp_path, capsys, flag, value, where):
    argv = ["--output_dir", str(tmp_path / "run"), flag, value]
    if where == "process":
        result = subprocess.run(
            [sys.executable, *TRAINER, *argv], capture_output=True, text=True, timeout=120, cwd=ROOT
        )
        assert result.returncode != 0 and "Traceback" not in result.stderr
        line = result.stderr.strip().splitlines()[-1]
    else:
        with pytest.raises(SystemExit) as raised:
            run_volo.main(argv)
        line = raised.value.code
        assert isinstance(line, str) and "\n" not in line and "Traceback" not in capsys.readouterr().err
    assert line.startswith(f"run_volo.py: error: {flag}")
    assert not (tmp_path / "run").exists()


def test_encoded_samples_decode_on_the_device_with_their_crop_and_flip():
    # The gpu_decode path, run on the CPU: the workers ship JPEG bytes plus a crop drawn from the
    # header; the device decodes, flips and crops. Left half black, right half white.
    import io

    array = np.zeros((200, 300, 3), dtype=np.uint8)
    array[:, 150:] = 255
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="JPEG", quality=95)

    class OneImage:
        num_classes = 1

        def __len__(self) -> int:
            return 64

        def read(self, index: int) -> bytes:
            return buffer.getvalue()

        def label(self, index: int) -> int:
            return 0

        def describe(self, index: int) -> str:
            return f"image {index}"

    transform = imagenet.TrainTransform(32, auto_augment=None, hflip=1.0, scale=(0.05, 0.1))
    dataset = imagenet.ImageTrainDataset(OneImage(), transform, encoded=True)
    batch = imagenet.collate([dataset[i] for i in range(16)])
    assert len(batch["jpeg"]) == 16 and batch["jpeg"][0].dtype == torch.uint8 and "pixel_values" not in batch
    crops = imagenet.GpuDecode(32, torch.device("cpu"), auto_augment=None)(
        batch["jpeg"], batch["crop_box"], batch["flipped"], batch["source"]
    )
    assert crops.shape == (16, 3, 32, 32) and crops.dtype == torch.uint8
    for crop, (x0, _, x1, _) in zip(crops.float(), batch["crop_box"].tolist(), strict=True):
        if x1 < 0.45:
            assert crop.mean() > 240  # flipped: the left half is the white one
        elif x0 > 0.55:
            assert crop.mean() < 15


def test_an_imagenet_folder_with_token_label_files_in_the_published_layout(tmp_path):
    from reprokit_trainers.common.data.synthetic import jpeg_bytes

    rng = np.random.default_rng(0)
    for wnid in ("n01440764", "n01443537"):
        (tmp_path / "imagenet" / "train" / wnid).mkdir(parents=True)
        (tmp_path / "labels" / wnid).mkdir(parents=True)
        for k in range(2):
            (tmp_path / "imagenet" / "train" / wnid / f"{wnid}_{k}.JPEG").write_bytes(
                jpeg_bytes(120, 90, rng)
            )
            label_map = torch.zeros(2, 5, 15, 15, dtype=torch.float16)
            label_map[1] = torch.arange(5).view(5, 1, 1) + 10 * k  # ids tell the files apart
            torch.save(label_map, tmp_path / "labels" / wnid / f"{wnid}_{k}.pt")
    data_args = run_volo.DataArguments(
        data_dir=str(tmp_path / "imagenet"),
        token_label_data=str(tmp_path / "labels"),
        dataloader_num_workers=0,
    )
    loader, info = run_volo.build_data(data_args, img_size=64, label_size=4, batch_size=4, seed=0)
    assert info["data"] == "imagenet-folder" and info["num_classes_data"] == 2
    batch = next(iter(loader))
    assert batch["pixel_values"].shape == (4, 3, 64, 64) and batch["label_map"].shape == (4, 2, 5, 15, 15)
    dataset = loader.dataset
    for index in range(4):
        sample = dataset[index]
        wnid, k = dataset.source.samples[index][0].split("/")[0], index % 2
        assert sample["labels"] == ("n01440764", "n01443537").index(wnid)
        assert sample["label_map"][1, 0, 0, 0].item() == 10 * k


# ----------------------------------------------------------------------------------------------
# A bad image in --data imagenet=... is named by its file


def _imagenet_with(root, bad: dict[str, bytes]):
    from tests.fakes import tiny_imagenet

    tiny_imagenet(root)
    for name, data in bad.items():
        (root / "train" / "n01440764" / name).write_bytes(data)
    return root


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"not a jpeg at all", "cannot identify image file"),
        (None, "image file is truncated (1 bytes not processed)"),
    ],
    ids=["garbage", "truncated"],
)
def test_a_bad_image_is_named_by_its_path(tmp_path, data, reason):
    from tests.fakes import truncated_jpeg

    if data is None:
        data = truncated_jpeg()
    root = _imagenet_with(tmp_path / "imagenet", {"n01440764_9.JPEG": data})
    source = imagenet.ImageFolderSource(root)
    dataset = imagenet.ImageTrainDataset(source, imagenet.TrainTransform(32, auto_augment=None))
    index = [i for i in range(len(source)) if source.describe(i).endswith("n01440764_9.JPEG")][0]
    with pytest.raises(imagenet.BadImage) as caught:
        dataset[index]
    bad = root / "train" / "n01440764" / "n01440764_9.JPEG"
    assert str(caught.value) == f"bad image {bad}: {reason}; remove or replace the file"


@pytest.mark.parametrize(
    "override, said",
    [
        (
            {"layers": [0, 0, 0, 0]},
            "the architecture's layers [0, 0, 0, 0]: give four whole numbers of at least 1",
        ),
        (
            {"embed_dims": [32, 64, 64]},
            "the architecture's embed_dims [32, 64, 64]: give four whole numbers of at least 1",
        ),
        (
            {"embed_dims": [32, 65, 65, 65]},
            "the architecture's stage 2 is 65 wide with 2 heads: a width its heads",
        ),
    ],
    ids=["no-blocks", "three-stages", "width-over-heads"],
)
def test_an_architecture_of_no_size_or_uneven_heads_is_one_line_and_no_run(tmp_path, override, said):
    """Before: a model of no blocks trained "ok"; three stages raised IndexError, a width the heads do not
    divide a RuntimeError at the first forward's reshape."""
    with pytest.raises(SystemExit) as stopped:
        run_volo.main(
            ["--output_dir", str(tmp_path / "run"), "--model_name_or_path", "volo_d1", "--model_kwargs_json",
             json.dumps({**TINY, **override}), "--synthetic_data", "--img_size", "32", "--token_label_size", "2",
             "--amp", "no", "--per_device_train_batch_size", "2", "--max_steps", "2", "--throughput_warmup_steps",
             "1", "--dataloader_num_workers", "0"]
        )  # fmt: skip
    assert str(stopped.value.code).startswith(f"run_volo.py: error: {said}"), stopped.value.code
    assert not (tmp_path / "run" / "summary.json").exists()


def test_a_class_folder_without_an_image_stops_the_trainer_in_one_line_without_a_preflight(tmp_path):
    from tests.fakes import tiny_imagenet

    root = tiny_imagenet(tmp_path / "imagenet")
    for name in ("n09999998", "n09999999"):
        (root / "train" / name).mkdir()
    with pytest.raises(SystemExit) as stopped:
        run_volo.main(
            ["--output_dir", str(tmp_path / "run"), "--model_name_or_path", "volo_d1", "--model_kwargs_json",
             json.dumps(TINY), "--data_dir", str(root), "--img_size", "32", "--token_label_size", "2", "--amp", "no",
             "--per_device_train_batch_size", "2", "--max_steps", "2", "--throughput_warmup_steps", "1",
             "--dataloader_num_workers", "0"]
        )  # fmt: skip
    train = root / "train"
    assert stopped.value.code == (
        f"run_volo.py: error: 2 of the 4 class folders of {train} hold no image (.jpeg, .jpg, .png): "
        f"{train / 'n09999998'}, {train / 'n09999999'}; every class given is trained on: add its images or remove "
        "the folder"
    )
    assert not (tmp_path / "run").exists()


def test_the_trainer_stops_in_one_line_naming_the_bad_file_from_a_loader_worker(tmp_path):
    root = _imagenet_with(tmp_path / "imagenet", {"n01440764_9.JPEG": b"\xff\xd8 torn"})
    command = [sys.executable, *TRAINER, "--output_dir", str(tmp_path / "run"), "--model_name_or_path", "volo_d1",
               "--model_kwargs_json", json.dumps(TINY), "--data_dir", str(root), "--img_size", "32",
               "--token_label_size", "2", "--per_device_train_batch_size", "3", "--dataloader_num_workers", "1",
               "--max_steps", "3", "--logging_steps", "1", "--throughput_warmup_steps", "1", "--amp", "no"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert result.returncode == 1, result.stderr[-2000:]
    bad = root / "train" / "n01440764" / "n01440764_9.JPEG"
    assert result.stderr.strip().splitlines()[-1] == (
        f"run_volo.py: error: bad image {bad}: cannot identify image file; remove or replace the file"
    )
    assert "Traceback" not in result.stderr and not (tmp_path / "run" / "summary.json").exists()


def test_the_gpu_loader_names_a_bad_image_its_header_let_through(tmp_path):
    # A JPEG cut after its header passes the workers (they read only the size); it fails at decode,
    # on the device, where the trainer must still say which file it was.
    from tests.fakes import truncated_jpeg

    root = _imagenet_with(tmp_path / "imagenet", {"n01440764_9.JPEG": truncated_jpeg()})
    source = imagenet.ImageFolderSource(root)
    dataset = imagenet.ImageTrainDataset(source, imagenet.TrainTransform(32, auto_augment=None), encoded=True)
    batch = imagenet.collate([dataset[i] for i in range(len(source))])
    with pytest.raises(imagenet.BadImage) as caught:
        imagenet.GpuDecode(32, torch.device("cpu"), auto_augment=None)(
            batch["jpeg"], batch["crop_box"], batch["flipped"], batch["source"]
        )
    bad = root / "train" / "n01440764" / "n01440764_9.JPEG"
    assert imagenet.BadImage.line(caught.value).startswith(f"bad image {bad}: image file is truncated")
