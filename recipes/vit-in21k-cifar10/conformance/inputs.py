"""The fixed inputs of the image-classification conformance fixture, made the same way by the golden
script (with optimum-habana's example) and by the test (with the kit's trainer): small RGB images of
CIFAR-10's size from a seeded generator, their labels, the tiny ViT, the seeds the random transforms
draw from, and the predictions the accuracy is computed over. numpy and Pillow only."""

from __future__ import annotations

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
ROWS = 20  # the fake cifar10's train split: 17 rows train, 3 validate at the example's 0.15
SIDE = 32
PROCESSOR = {"size": 16, "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}  # ViT's processor, smaller
TINY = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
        "image_size": 16, "patch_size": 8, "num_channels": 3, "qkv_bias": True}  # fmt: skip
TRANSFORM_SEEDS = [0, 1, 2]  # torch.manual_seed before each image's random crop and flip
BATCH = 3  # images 0..BATCH-1 are collated and put through the model
PREDICTIONS = {"logits": [[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5], [0.6, 0.2, 0.2]],
               "labels": [1, 0, 1, 2]}  # fmt: skip


def images() -> list:
    """ROWS RGB PIL images of SIDE x SIDE, seeded; the first one in mode L, as a one-band row would be."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(7)
    out = [Image.fromarray(rng.integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8), "RGB") for _ in range(ROWS)]
    out[0] = out[0].convert("L")  # the example converts every image to RGB: one that is not
    return out


def labels() -> list[int]:
    return [i % len(CLASSES) for i in range(ROWS)]
