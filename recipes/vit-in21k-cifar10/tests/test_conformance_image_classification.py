"""The image-classification trainer against optimum-habana's example itself: golden values made by the
example's own main at a pinned commit (conformance/make_image_classification_golden.py; the fixture
names the commit and the command), compared with no network. The kit's trainer must hold out the
same rows, label the model the same way, and compute what the example computed: each transform's
pixels for the same images and seeds, the collated batch, the model's logits and loss on it, the
accuracy."""

from __future__ import annotations

import base64
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("datasets")

from reprokit_trainers.image_classification import data, run_image_classification  # noqa: E402
from tests.conformance.weights import deterministic_  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

HERE = Path(__file__).resolve().parents[1] / "conformance"
GOLDEN = json.loads((HERE / "image_classification_golden.json").read_text())
_spec = importlib.util.spec_from_file_location("image_classification_inputs", HERE / "inputs.py")
inputs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(inputs)


def tensor(stored: dict) -> torch.Tensor:
    values = np.frombuffer(base64.b64decode(stored["float32"]), dtype="<f4").reshape(stored["shape"])
    return torch.from_numpy(values.copy())


def kit_pixels(transform) -> list[torch.Tensor]:
    apply = data.batch_transform(transform, "img")
    images, out = inputs.images(), []
    for index, seed in enumerate(inputs.TRANSFORM_SEEDS):
        torch.manual_seed(seed)
        out.append(apply({"img": [images[index]], "label": [inputs.labels()[index]]})["pixel_values"][0])
    return out


def processor() -> tuple:
    p = inputs.PROCESSOR
    return data.processor_size({"height": p["size"], "width": p["size"]}), p["mean"], p["std"]


def test_the_fixture_was_made_by_the_example_at_the_pinned_commit():
    assert GOLDEN["upstream"]["commit"] == "7e37a6eaae5f090bf1cbf8c38f24d9ec68d45f36"
    assert GOLDEN["made_with"]["transformers"] == "4.49.0"  # what optimum-habana 1.17 pins


def test_the_kit_holds_out_the_examples_validation_rows():
    dataset = data.synthetic_cifar10(inputs.ROWS, 1, 2, 0, "img", "label")
    held = data.hold_out_validation(dataset, 0.15, seed=1337)
    assert {"train": len(held["train"]), "validation": len(held["validation"])} == GOLDEN["rows"]


@pytest.mark.parametrize("kind", ["train", "val"])
def test_the_kits_transforms_make_the_examples_pixels(kind):
    make = data.train_transform if kind == "train" else data.val_transform
    for kit, golden in zip(kit_pixels(make(*processor())), GOLDEN[f"{kind}_pixels"], strict=True):
        torch.testing.assert_close(kit, tensor(golden), rtol=0, atol=1e-6)


def test_the_kits_collate_and_model_compute_the_examples_logits_and_loss():
    pixels = kit_pixels(data.train_transform(*processor()))
    batch = data.collate("label")(
        [{"pixel_values": pixels[i], "label": inputs.labels()[i]} for i in range(inputs.BATCH)]
    )
    torch.testing.assert_close(
        batch["pixel_values"], tensor(GOLDEN["collate"]["pixel_values"]), rtol=0, atol=0
    )
    assert batch["labels"].tolist() == GOLDEN["collate"]["labels"]
    assert str(batch["labels"].dtype) == GOLDEN["collate"]["labels_dtype"]
    model_args = run_image_classification.ModelArguments(
        random_init=True, model_config_json=json.dumps(inputs.TINY)
    )
    model, _, source, _ = run_image_classification.load_model(model_args, list(inputs.CLASSES))
    assert source == "random" and model.config.num_labels == GOLDEN["labels"]["num_labels"]
    assert {str(k): v for k, v in model.config.id2label.items()} == GOLDEN["labels"]["id2label"]
    deterministic_(dict(model.named_parameters()))
    with torch.no_grad():
        output = model.eval()(**batch)
    torch.testing.assert_close(output.logits, tensor(GOLDEN["logits"]), rtol=1e-5, atol=1e-6)
    assert output.loss.item() == pytest.approx(GOLDEN["loss"], rel=1e-5)


def test_the_kits_accuracy_is_the_examples():
    from transformers import EvalPrediction

    given = inputs.PREDICTIONS
    found = data.accuracy(EvalPrediction(np.array(given["logits"]), np.array(given["labels"])))
    assert found == GOLDEN["metrics"]
