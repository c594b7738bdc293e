"""The data path of optimum-habana's image-classification example, and the offline stand-in for
CIFAR-10 (recipes/vit-in21k-cifar10/SOURCES.md §2, §4).

As published: the dataset's ``train`` split, less the ``train_val_split`` share held out as the
validation split when the dataset has none (CIFAR-10 has none: 42,500 rows train, 7,500 validate);
each row's image converted to RGB and put through torchvision's ``RandomResizedCrop`` to the image
processor's size, a horizontal flip, ``ToTensor`` and the processor's mean/std in the loader (the
dataset's on-the-fly transform); validation rows resized and centre-cropped instead; a batch is the
stacked pixels and the labels. Accuracy is the share of rows whose arg-max logit is the label.

The stand-in (``synthetic_cifar10``) has CIFAR-10's shapes: 32x32 RGB PNGs, ten named classes, the
real split sizes; its rows are stored and decoded as the real ones are (a ``datasets.Image`` column).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torchvision.transforms import (
    CenterCrop,
    Compose,
    Normalize,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ToTensor,
)

# CIFAR-10's classes in its label order, its image side and split sizes.
CIFAR10_CLASSES = (
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
)  # fmt: skip
CIFAR10_SIDE = 32
CIFAR10_TRAIN, CIFAR10_TEST = 50_000, 10_000


def processor_size(size: dict[str, int]) -> int | tuple[int, int]:
    """The transforms' size from an image processor's ``size``, as the example reads it."""
    if "shortest_edge" in size:
        return size["shortest_edge"]
    return (size["height"], size["width"])


def train_transform(size: int | tuple[int, int], mean: Sequence[float], std: Sequence[float]) -> Compose:
    return Compose(
        [RandomResizedCrop(size), RandomHorizontalFlip(), ToTensor(), Normalize(mean=mean, std=std)]
    )


def val_transform(size: int | tuple[int, int], mean: Sequence[float], std: Sequence[float]) -> Compose:
    return Compose([Resize(size), CenterCrop(size), ToTensor(), Normalize(mean=mean, std=std)])


def batch_transform(transform: Compose, image_column: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The dataset's on-the-fly transform: each row's image, in RGB, into ``pixel_values``."""

    def apply(batch: dict[str, Any]) -> dict[str, Any]:
        batch["pixel_values"] = [transform(image.convert("RGB")) for image in batch[image_column]]
        return batch

    return apply


def collate(label_column: str) -> Callable[[list[dict[str, Any]]], dict[str, torch.Tensor]]:
    def collate_fn(examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        pixel_values = torch.stack([example["pixel_values"] for example in examples])
        labels = torch.tensor([example[label_column] for example in examples])
        return {"pixel_values": pixel_values, "labels": labels}

    return collate_fn


def accuracy(predictions: Any) -> dict[str, float]:
    """The example's metric (evaluate's ``accuracy`` over the arg-max of the logits)."""
    logits, labels = predictions.predictions, predictions.label_ids
    return {"accuracy": float((np.argmax(logits, axis=1) == labels).mean())}


def hold_out_validation(dataset: Any, share: float | None, seed: int) -> Any:
    """The validation split carved out of train where the dataset has none, as the example does
    (its call passes no seed: the kit passes the run's, so a rerun holds out the same rows)."""
    if "validation" in dataset or not share:
        return dataset
    split = dataset["train"].train_test_split(share, seed=seed)
    dataset["train"], dataset["validation"] = split["train"], split["test"]
    return dataset


def _png(pixels: np.ndarray) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, format="PNG")
    return out.getvalue()


def synthetic_cifar10(
    num_train: int, num_test: int, unique_images: int, seed: int, image_column: str, label_column: str
) -> Any:
    """A DatasetDict of CIFAR-10's shapes: ``unique_images`` random 32x32 RGB PNGs repeated over the
    rows (each row stores and decodes its own bytes), labels drawn uniformly from the ten classes."""
    import datasets

    rng = np.random.default_rng(seed)
    pool = [
        _png(rng.integers(0, 256, (CIFAR10_SIDE, CIFAR10_SIDE, 3), dtype=np.uint8))
        for _ in range(min(unique_images, num_train + num_test))
    ]
    features = datasets.Features(
        {image_column: datasets.Image(), label_column: datasets.ClassLabel(names=list(CIFAR10_CLASSES))}
    )

    def split(rows: int, offset: int) -> Any:
        labels = rng.integers(0, len(CIFAR10_CLASSES), rows).tolist()
        images = [{"bytes": pool[(offset + i) % len(pool)], "path": None} for i in range(rows)]
        return datasets.Dataset.from_dict({image_column: images, label_column: labels}, features=features)

    return datasets.DatasetDict({"train": split(num_train, 0), "test": split(num_test, num_train)})
