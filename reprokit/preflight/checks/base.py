"""What a preflight check is: a name, whether it applies to a session, and the findings it returns."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from reprokit.preflight.context import Context
from reprokit.preflight.findings import Finding


class Check(ABC):
    name: ClassVar[str]

    def applies(self, context: Context) -> bool:
        return True

    @abstractmethod
    def run(self, context: Context) -> list[Finding]:
        """The findings of this check; a problem is a Finding with `blocks`, never an exception."""

    def finding(self, message: str, blocks: bool = False, cells: tuple[str, ...] = ()) -> Finding:
        return Finding(self.name, message, blocks, cells)
