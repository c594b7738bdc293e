"""The accelerator's own code for the trainers: `accelerators/<name>/trainer.py`, loaded by its path.

The kit's accelerators are folders (reprokit/plan/accelerators.py, the host's side); what the trainers
need of one (its energy source, its device memory) is its folder's trainer.py, which imports no
more than the trainers' package. It is found by the accelerator's name, which run.sh exports as
REPROKIT_ACCELERATOR, in the first of these folders that has it: beside the trainers in an image
(/opt/reprokit/accelerators), a checkout's accelerators/, or an installed wheel's
reprokit/bundle/accelerators (read as files: the trainers never import the kit). Started without
that name (by hand, in tests), the accelerator is the first, by name, whose TORCH_DEVICE is the
device type torch trains on. This module must not import the kit.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

TRAINERS = Path(__file__).resolve().parents[1]
MODULE = "trainer.py"
ENV = "REPROKIT_ACCELERATOR"


def roots() -> list[Path]:
    """The folders that may hold the accelerators' folders, in the order they are searched."""
    above = TRAINERS.parent  # /opt/reprokit in an image, scripts/ in a checkout, site-packages installed
    return [
        above / "accelerators",
        above.parent / "accelerators",
        above / "reprokit" / "bundle" / "accelerators",
    ]


def folders() -> dict[str, Path]:
    """Each accelerator's folder that has trainer code, by name (the first root's where several do)."""
    found: dict[str, Path] = {}
    for root in roots():
        for path in sorted(root.glob(f"*/{MODULE}")) if root.is_dir() else []:
            found.setdefault(path.parent.name, path.parent)
    return found


@cache
def load(name: str) -> ModuleType:
    """The trainer code of accelerator `name`; ImportError names where it was looked for."""
    folder = folders().get(name)
    if folder is None:
        raise ImportError(f"no {name}/{MODULE} in {', '.join(str(r) for r in roots())}")
    module_name = f"reprokit_accelerator_{name.replace('-', '_')}"
    spec = importlib.util.spec_from_file_location(module_name, folder / MODULE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def this_accelerator(device_type: str) -> ModuleType:
    """The code of the accelerator this run was planned for (REPROKIT_ACCELERATOR); without it, of the
    first accelerator, by name, whose TORCH_DEVICE is `device_type` (else the CPU's)."""
    named = os.environ.get(ENV, "").strip()
    if named:
        return load(named)
    for name in folders():
        module = load(name)
        if getattr(module, "TORCH_DEVICE", None) == device_type:
            return module
    return load("cpu")
