"""The conformance helpers every publication shares (the loop recorder, the side environment's install
line, deterministic weights and images). A publication's own fixtures, their generator and its tests
are in its folder: recipes/<name>/conformance/ and recipes/<name>/tests/ (found here, never listed)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def folders() -> list[Path]:
    """Every publication's conformance folder."""
    return sorted(p for p in RECIPES.glob("*/conformance") if p.is_dir())


def goldens() -> dict[str, Path]:
    """Each trainer's golden fixture (`<trainer>_golden.json` in its publication's conformance folder)."""
    return {p.name.removesuffix("_golden.json"): p for f in folders() for p in f.glob("*_golden.json")}


def golden(trainer: str) -> dict[str, Any]:
    return json.loads(goldens()[trainer].read_text())


def module(path: Path) -> ModuleType:
    """A module of a publication's conformance folder (its fixed inputs), loaded from its file once, by
    its name: the folder is no package, and its generator imports the module by that name too."""
    if path.stem not in sys.modules:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = loaded
        spec.loader.exec_module(loaded)
    return sys.modules[path.stem]
