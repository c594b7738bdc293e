"""Fake trainers and throwaway recipes: the kit's session machinery, end to end, in seconds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

FAKES = Path(__file__).resolve().parent
ROOT = FAKES.parent.parent


def fake_recipe(path: Path, variants: list[dict[str, Any]], tolerance: float = 0.10) -> Path:
    """The BridgeTower recipe with the fake trainer and the given variants (its hyperparameters are
    passed to the fake trainer, which ignores them, so the command lines stay realistic)."""
    data = yaml.safe_load((ROOT / "recipes" / "bridgetower.yaml").read_text())
    data.update(
        name="fake",
        title="A fake recipe for the kit's tests",
        trainer="fake_trainer.py",
        tolerance=tolerance,
        variants=variants,
    )
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def fake_env() -> dict[str, str]:
    """Environment that points the local runtime at the fake trainers."""
    return {"REPROKIT_SCRIPTS": str(FAKES)}
