"""Validation errors of the kit's YAML files (recipes, accelerator profiles, base manifests) in one
line: the file, then each problem's key path and what was expected."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

# Where each file's keys are described: the accelerator profiles and base manifests in their
# folders' README, every other file a recipe.
README = {"profile.yaml": "accelerators/README.md", "base.yaml": "accelerators/README.md"}


def one_line(source: str, error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        location = ".".join(str(p) for p in item["loc"]) or "(top level)"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = (
                f"unknown key (check the spelling; see {README.get(Path(source).name, 'recipes/README.md')})"
            )
        parts.append(f"{location}: {message}")
    head = f"{source}: " + ("" if len(parts) == 1 else f"{len(parts)} problems: ")
    return head + "; ".join(parts)
