"""Fake trainers and throwaway recipes: the kit's session machinery, end to end, in seconds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

FAKES = Path(__file__).resolve().parent
ROOT = FAKES.parent.parent


IMAGENET_KEY = {
    "imagenet": {
        "arg": "data_dir",
        "layout": "imagenet",
        "help": "an ImageNet-layout folder",
        "replaces": ["synthetic_data"],
    }
}


def bridgetower_recipe() -> dict[str, Any]:
    """BridgeTower's recipe as data, most throwaway recipes' start: read by libyaml (2 ms; PyYAML's
    Python reader took 25, in most of the suite's tests). The loader is boundedyaml.LOADER's choice,
    written here because this package is also the fake trainers', which never import the kit."""
    text = (ROOT / "recipes" / "bridgetower" / "recipe.yaml").read_text()
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def fake_recipe(
    path: Path,
    variants: list[dict[str, Any]],
    tolerance: float = 0.10,
    data_keys: dict | None = None,
    name: str = "fake",
) -> Path:
    """The BridgeTower recipe with the fake trainer and the given variants (its hyperparameters are
    passed to the fake trainer, which ignores them, so the command lines stay realistic)."""
    data = bridgetower_recipe()
    if data_keys:
        data["dataset"]["data"] = data_keys
    data.update(
        name=name,
        title="A fake recipe for the kit's tests",
        trainer="fakes.fake_trainer",
        tolerance=tolerance,
        variants=variants,
        # The published commands name the real recipe's variants, and so does its GPU bench.
        published_commands=[],
        node={**data.get("node", {}), "bench": None},
    )
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def tiny_imagenet(root: Path) -> Path:
    """ImageNet's layout: two classes of one small JPEG each."""
    from PIL import Image

    for name in ("n01440764", "n01443537"):
        (root / "train" / name).mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (40, 30), (200, 120, 40)).save(root / "train" / name / f"{name}_1.JPEG")
    return root


def truncated_jpeg() -> bytes:
    """A real JPEG cut in half, as an interrupted copy leaves it: its header reads, its body does not."""
    from io import BytesIO

    import numpy as np
    from PIL import Image

    buffer = BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(
        buffer, "JPEG"
    )
    return buffer.getvalue()[: len(buffer.getvalue()) // 2]


def fake_env() -> dict[str, str]:
    """Environment that puts the fake trainers (the `fakes` package) where the local runtime looks."""
    return {"REPROKIT_TRAINERS_PATH": str(FAKES.parent)}
