"""Plug-in registries: a name, the class that implements it (as "module:Class", imported on first
use so that nothing heavy loads while only planning), and third-party plug-ins from entry points.

As ReFrame keeps schedulers, launchers and container platforms in independent registries, the kit
keeps runtimes (where a cell runs) and container platforms (what it runs in) apart: any runtime can
use any container platform it supports.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from reprokit.contract.errors import ReprokitError


class Registry:
    def __init__(self, kind: str, builtin: dict[str, str], group: str) -> None:
        self.kind = kind
        self.targets = dict(builtin)
        self.group = group
        self._discovered = False

    def register(self, name: str, target: str) -> None:
        """Add a plug-in: `name` -> "package.module:Class"."""
        self.targets[name] = target

    def _discover(self) -> None:
        # Packages that declare [project.entry-points."reprokit.runtimes"] (or "reprokit.containers") add
        # theirs: names of the kit's interface, not of its folders, so a move inside the kit breaks no plug-in.
        if not self._discovered:
            for point in entry_points(group=self.group):
                self.targets.setdefault(point.name, point.value)
            self._discovered = True

    def names(self) -> list[str]:
        self._discover()
        return list(self.targets)

    def load(self, name: str) -> Any:
        self._discover()
        if name not in self.targets:
            raise ReprokitError(
                f"unknown {self.kind} {name!r}; known {self.kind}s: {', '.join(self.targets)}"
            )
        module, _, attribute = self.targets[name].partition(":")
        try:
            return getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as exc:
            raise ReprokitError(
                f"{self.kind} {name!r} ({self.targets[name]}) cannot be loaded: {exc}"
            ) from None
