"""The BridgeTower trainer against optimum-habana v1.7.0's example and transformers 4.31: golden values
made by that code (recipes/bridgetower/conformance/make_bridgetower_golden.py; the fixture names the tag, the commit
and the command), compared with no network. A published GPU cell must preprocess and collate as the
example did, compute the same contrastive loss, and step the optimizer transformers 4.31's Trainer built
by default."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from PIL import Image  # noqa: E402

from reprokit_trainers.bridgetower import fastimage, run_bridgetower  # noqa: E402
from reprokit_trainers.common.record import software  # noqa: E402
from tests.conformance.weights import deterministic_  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

GOLDEN = json.loads(
    (Path(__file__).resolve().parents[1] / "conformance" / "bridgetower_golden.json").read_text()
)
CONFIG = GOLDEN["config"]


def decoded(data: str) -> Image.Image:
    image = Image.open(io.BytesIO(base64.b64decode(data)))
    image.load()  # as datasets hands a decoded image over
    return image


def check_images(transform) -> list[torch.Tensor]:
    out = []
    for data, golden in zip(GOLDEN["jpegs"], GOLDEN["images"], strict=True):
        image = decoded(data)
        assert image.mode == golden["mode"]
        pixels = transform(image)
        step = max(1, pixels.shape[-1] // 4)
        assert list(pixels.shape) == golden["shape"] and str(pixels.dtype) == golden["dtype"]
        assert pixels.double().sum().item() == pytest.approx(golden["sum"], rel=1e-6, abs=1e-3)
        assert pixels.double().square().sum().item() == pytest.approx(golden["sum_of_squares"], rel=1e-6)
        torch.testing.assert_close(
            pixels[:, ::step, ::step].flatten(), torch.tensor(golden["grid"]), rtol=0, atol=2e-6
        )
        out.append(pixels)
    return out


def test_the_published_image_path_is_v1_7_0s_on_an_rgb_and_a_grey_jpeg():
    check_images(fastimage.published_transform(CONFIG["image_size"], CONFIG["mean"], CONFIG["std"]))


def test_the_collated_batch_is_v1_7_0s():
    pixels = check_images(fastimage.published_transform(CONFIG["image_size"], CONFIG["mean"], CONFIG["std"]))
    examples = [
        {"pixel_values": p, "input_ids": [0, 5, 7, 2], "attention_mask": [1, 1, 1, 1]} for p in pixels
    ]
    batch = run_bridgetower.collate_fn(examples)
    assert set(batch) == set(GOLDEN["collate"])
    for key, golden in GOLDEN["collate"].items():
        if isinstance(golden, dict):
            assert (list(batch[key].shape), str(batch[key].dtype)) == (golden["shape"], golden["dtype"]), key
        else:
            assert batch[key] == golden


def test_the_contrastive_loss_and_its_gradients_are_transformers_4_31s():
    from transformers import BridgeTowerConfig, BridgeTowerForContrastiveLearning

    model = BridgeTowerForContrastiveLearning(BridgeTowerConfig(**CONFIG["tiny"]))
    deterministic_(dict(model.named_parameters()))
    model.eval()  # dropout off, as the golden was made
    size = CONFIG["image_size"]
    output = model(
        input_ids=torch.tensor([[0, 5, 7, 9, 2], [0, 11, 3, 2, 1]]),
        attention_mask=torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]),
        pixel_values=torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(2)),
        return_loss=True,
    )
    output.loss.backward()
    assert output.loss.item() == pytest.approx(GOLDEN["loss"], rel=1e-5)
    norms = torch.stack([p.grad.norm() for p in model.parameters() if p.grad is not None])
    assert torch.norm(norms).item() == pytest.approx(GOLDEN["grad_norm_total"], rel=1e-4)


def published_optimizer(tmp_path: Path, optim: str | None) -> torch.optim.Optimizer:
    from transformers import BridgeTowerConfig, BridgeTowerForContrastiveLearning, Trainer, TrainingArguments

    model = BridgeTowerForContrastiveLearning(BridgeTowerConfig(**CONFIG["tiny"]))
    extra = {"optim": optim} if optim else {}
    args = TrainingArguments(output_dir=str(tmp_path), learning_rate=1e-5, report_to=[], **extra)
    trainer = Trainer(model=model, args=args)
    trainer.create_optimizer()
    return trainer.optimizer


def recipe_optim(accelerator: str) -> str | None:
    from reprokit.plan import cells, recipes

    cell = cells.expand(recipes.load("bridgetower"), "bridgetower", accelerator, "published", ["workers2"])[0]
    return cell.args.get("optim")


def check_optimizer(optimizer: torch.optim.Optimizer) -> None:
    golden = GOLDEN["optimizer"]
    assert f"{type(optimizer).__module__}.{type(optimizer).__name__}" == golden["class"]
    groups = [
        {"params": len(g["params"]), "weight_decay": g["weight_decay"], "eps": g["eps"]}
        for g in optimizer.param_groups
    ]
    assert groups == golden["param_groups"]
    assert software.optimizer(optimizer) == "adamw-per-tensor (transformers)"


def test_the_published_gpu_cells_step_transformers_4_31s_default_optimizer(tmp_path):
    """transformers 4.31 defaulted to optim adamw_hf (its own per-tensor AdamW); 4.49 to torch's.
    The recipe asks for adamw_hf, and 4.49's Trainer then builds the very optimizer 4.31's did."""
    assert GOLDEN["optimizer"]["optim"] == recipe_optim("cuda") == "adamw_hf"
    check_optimizer(published_optimizer(tmp_path, recipe_optim("cuda")))


def published_step(tmp_path: Path, optim: str | None) -> tuple[dict[str, torch.Tensor], list[float]]:
    """The published cell's optimizer (its TrainingArguments: learning rate, optim) stepped once from
    the golden's gradients, and the learning rates the Trainer schedules for the golden's run length."""
    from dataclasses import fields

    from transformers import BridgeTowerConfig, BridgeTowerForContrastiveLearning, Trainer, TrainingArguments

    from reprokit.plan import cells, recipes

    cell = cells.expand(recipes.load("bridgetower"), "bridgetower", "cuda", "published", ["workers2"])[0]
    known = {f.name for f in fields(TrainingArguments)}
    asked = {k: v for k, v in cell.args.items() if k in known and ("lr" in k or "adam" in k or k in (
        "learning_rate", "weight_decay", "warmup_steps", "warmup_ratio", "optim"))}  # fmt: skip
    if optim != "recipe":
        asked = {k: v for k, v in asked.items() if k != "optim"} | ({"optim": optim} if optim else {})
    model = BridgeTowerForContrastiveLearning(BridgeTowerConfig(**CONFIG["tiny"]))
    deterministic_(dict(model.named_parameters()))
    model.eval()
    size = CONFIG["image_size"]
    model(
        input_ids=torch.tensor([[0, 5, 7, 9, 2], [0, 11, 3, 2, 1]]),
        attention_mask=torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]),
        pixel_values=torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(2)),
        return_loss=True,
    ).loss.backward()
    trainer = Trainer(model=model, args=TrainingArguments(output_dir=str(tmp_path), report_to=[], **asked))
    trainer.create_optimizer()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer.optimizer.step()
    updates = {name: (p.detach() - before[name]).double() for name, p in model.named_parameters()}
    scheduler = trainer.create_scheduler(len(GOLDEN["optimizer"]["learning_rates"]), trainer.optimizer)
    rates = []
    for _ in GOLDEN["optimizer"]["learning_rates"]:
        rates.append(scheduler.get_last_lr()[0])
        scheduler.step()
    return updates, rates


def check_step(updates: dict[str, torch.Tensor], rates: list[float]) -> None:
    golden = GOLDEN["optimizer"]["first_step"]
    total = torch.norm(torch.stack([u.norm() for u in updates.values()])).item()
    assert total == pytest.approx(golden["update_norm_total"], rel=1e-4)
    for name, values in golden["updates"].items():
        # float32 parameters near 0.02 round an update of ~1e-5 to about 2e-9
        assert updates[name].flatten()[:4].tolist() == pytest.approx(values, abs=1e-8), name
    assert rates == pytest.approx(GOLDEN["optimizer"]["learning_rates"], rel=1e-9)


def test_one_step_and_the_schedule_of_the_published_optimizer_are_transformers_4_31s(tmp_path):
    check_step(*published_step(tmp_path, "recipe"))


def test_a_changed_published_semantic_fails_the_comparison(tmp_path):
    """Today's defaults are departures the suite catches: transformers 4.49's default optimizer, and
    torchvision's antialiased tensor Resize (the 2023 one did not antialias)."""
    with pytest.raises(AssertionError):
        check_optimizer(published_optimizer(tmp_path, None))
    # torch's AdamW folds the bias corrections in elsewhere: its first step differs where gradients are small.
    with pytest.raises(AssertionError):
        check_step(*published_step(tmp_path, None))
    from torchvision.transforms import CenterCrop, InterpolationMode, Normalize, Resize

    size = CONFIG["image_size"]
    antialiased = torch.nn.Sequential(
        Resize([size], interpolation=InterpolationMode.BICUBIC, antialias=True),
        CenterCrop(size),
        Normalize(CONFIG["mean"], CONFIG["std"]),
    )
    with pytest.raises(AssertionError):
        check_images(lambda image: antialiased(fastimage.published_pixels(image)))


def test_the_fixture_says_which_upstream_release_and_command_made_it():
    assert GOLDEN["upstream"] == {
        "repository": "huggingface/optimum-habana",
        "tag": "v1.7.0",
        "commit": "daa24c97fe77cc9a2e45d6c1b3d0eead14dfe0e0",
        "script": "examples/contrastive-image-text/run_bridgetower.py",
    }
    assert GOLDEN["command"].startswith(
        "python recipes/bridgetower/conformance/make_bridgetower_golden.py --optimum-habana "
    )
    # The publication's transformers, and its image path: torchvision's tensor resize without antialias.
    assert (
        GOLDEN["made_with"]["transformers"] == "4.31.0" and GOLDEN["made_with"]["resize_antialias"] is False
    )
