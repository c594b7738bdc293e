"""The fixed inputs of the VOLO conformance suite, shared by the side that makes the golden values
(make_volo_golden.py, run against sail-sg/volo and the token-labeling toolbox) and the side that
checks the kit against them (recipes/volo/tests/test_conformance_volo.py). Only torch and numpy: both sides
import it, and so the inputs cannot differ.

Everything is a function of names and seeds: the tiny VOLO's weights are drawn per tensor from a
generator seeded with the tensor's name (the two implementations name their tensors alike), so no
weights need to be stored with the fixtures.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import torch

# A VOLO-D1 cut down to one block per stage: outlooker, downsample, transformer, two class blocks.
ARCHITECTURE = {
    "layers": [1, 1, 1, 1],
    "embed_dims": [32, 64, 64, 64],
    "num_heads": [1, 2, 2, 2],
    "stem_hidden_dim": 16,
}
MLP_RATIO = 3
IMG_SIZE = 64  # a 4 x 4 token grid
NUM_CLASSES = 10  # few classes, so that smoothing's s/C terms are far above float noise
BATCH = 2
SMOOTHING = 0.1
LABEL_SIZE = 4
MAP_SIZE = 8  # the label maps' H = W (the toolbox keeps the image label at [2, 0, 0, 5] of its map)

# Crops as the toolbox's RandomResizedCrop draws them, (top, left, height, width) as fractions of
# the image. Dyadic, so that the toolbox's float16 copy of them is exact; far from square, so that
# swapping x and y shows.
CROPS = [(0.125, 0.0625, 0.375, 0.8125), (0.25, 0.5, 0.6875, 0.25), (0.0, 0.0, 1.0, 1.0)]
FLIPPED = [False, True, False]
LABELS = [3, 7, 1]

# The learning-rate schedules checked: main.py's flags of the D1 recipes (recipes/volo/SOURCES.md §2).
SCHEDULES = {
    "pretrain-d1": {
        "lr": 1.6e-3,
        "epochs": 300,
        "warmup_epochs": 20,
        "cooldown_epochs": 10,
        "warmup_lr": 1e-6,
        "min_lr": 1e-5,
    },
    "finetune-d1-384": {
        "lr": 8e-6,
        "epochs": 30,
        "warmup_epochs": 5,
        "cooldown_epochs": 10,
        "warmup_lr": 1e-6,
        "min_lr": 4e-6,
    },
}
OPTIMIZER = {"lr": 1e-3, "weight_decay": 0.05, "steps": 2}


def _generator(name: str, salt: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(name.encode()) + salt)


def fill_weights(named: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Overwrite every floating tensor in place, from its name: the scales of the norms (the 1-D
    weights) and BatchNorm's running variances near 1, the rest small."""
    with torch.no_grad():
        for name, tensor in named:
            if not tensor.is_floating_point():
                continue
            values = torch.randn(tensor.shape, generator=_generator(name)) * 0.05
            if name.endswith("running_var") or (name.endswith(".weight") and tensor.dim() == 1):
                values += 1.0
            tensor.copy_(values)


def fill_gradients(named: Iterable[tuple[str, torch.nn.Parameter]]) -> None:
    """A gradient for every parameter, from its name: what one optimizer step is checked with."""
    for name, parameter in named:
        parameter.grad = torch.randn(parameter.shape, generator=_generator(name, salt=1)) * 0.01


def images() -> torch.Tensor:
    """[BATCH, 3, IMG_SIZE, IMG_SIZE], roughly normalized pixels."""
    return torch.randn(BATCH, 3, IMG_SIZE, IMG_SIZE, generator=torch.Generator().manual_seed(0))


def label_maps() -> torch.Tensor:
    """[len(CROPS), 2, 5, MAP_SIZE, MAP_SIZE] float16 top-5 maps, as the NFNet-F6 files hold them:
    descending scores and five distinct class ids at every location."""
    generator = torch.Generator().manual_seed(1)
    maps = []
    for _ in CROPS:
        scores = torch.randn(5, MAP_SIZE, MAP_SIZE, generator=generator).mul(2.0).add(4.0)
        ids = [torch.randperm(NUM_CLASSES, generator=generator)[:5] for _ in range(MAP_SIZE * MAP_SIZE)]
        ids = torch.stack(ids, -1).view(5, MAP_SIZE, MAP_SIZE)
        maps.append(torch.stack([scores.sort(0, descending=True).values, ids.float()]))
    return torch.stack(maps).half()


def boxes() -> torch.Tensor:
    """The crops as the kit's loaders give them: (x0, y0, x1, y1) fractions of the flipped image."""
    return torch.tensor([[left, top, left + width, top + height] for top, left, height, width in CROPS])
