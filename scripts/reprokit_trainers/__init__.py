"""The container side of reprokit: one trainer per published benchmark, and what they share.

Each trainer is a folder with its script, its helpers and a README giving the published command and
every departure from it; it runs as ``python -m reprokit_trainers.<name> --output_dir DIR ...``
(also under ``torchrun ... -m`` and ``mpirun ... python -m``). What the trainers share, and only
that, lives in ``reprokit_trainers.common``.

A publication's own trainer lives in its folder, ``recipes/<recipe>/<name>/``, and is still
``reprokit_trainers.<name>``: in a checkout or an installed kit, the recipe folders that hold a trainer
package are added to this package's path below (an image and a bare node's copy hold them here, flat).

This package imports torch, transformers and timm, and never imports the host package ``reprokit``:
the two sides meet only in the run directory (README, "The run directory").
"""

from __future__ import annotations

from pathlib import Path


def _publication_folders(package: Path) -> list[str]:
    """The recipe folders beside this package that hold a trainer package (`<name>/` with its
    `__init__.py` and `arguments.json`): the installed kit's (reprokit/bundle/recipes, beside this
    package in site-packages) or a checkout's (scripts/reprokit_trainers -> recipes). The package's own
    path is not resolved: a kit assembled from links finds the recipes beside the link."""
    for recipes in (package.parent / "reprokit" / "bundle" / "recipes", package.parent.parent / "recipes"):
        if recipes.is_dir():
            return sorted(
                {
                    str(p.parent.parent)
                    for p in recipes.glob("*/*/arguments.json")
                    if (p.parent / "__init__.py").is_file()
                }
            )
    return []


__path__ += _publication_folders(Path(__file__).absolute().parent)
