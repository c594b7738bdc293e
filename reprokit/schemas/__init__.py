"""The JSON Schema of each `--json` output (recipes, history, compare, preflight, acceptance; Draft 2020-12): what a
script reading the kit's output may rely on. Each output names its schema (``"schema":
"reprokit/<name>/<version>"``), and the tests validate every output against the file here."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

VERSION = 1
NAMES = ("recipes", "history", "compare", "preflight", "acceptance")


def schema(name: str) -> dict[str, Any]:
    """The JSON Schema of one output."""
    return json.loads(resources.files(__package__).joinpath(f"{name}.schema.json").read_text())


def tagged(name: str, payload: dict[str, Any]) -> dict[str, Any]:
    """An output with the name and version of its schema first."""
    return {"schema": f"reprokit/{name}/{VERSION}", **payload}


def dumps(name: str, payload: dict[str, Any]) -> str:
    return json.dumps(tagged(name, payload), indent=2, default=str)
