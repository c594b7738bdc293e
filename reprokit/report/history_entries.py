"""What history holds: an entry (one cell of one session, placed in time: the session, when the cell
started, the machine it ran on, its row) and the history read (its entries, the sessions left out)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from reprokit.contract.bounded import Malformed
from reprokit.judge.result_row import Row

# The columns an entry holds itself; the others are its row's.
OWN = ("session", "started_at", "machine")


@dataclass(frozen=True)
class Entry:
    """One cell of one session, placed in time: the table's columns and what the plots need."""

    session: str
    session_started: datetime
    # When the cell started, in UTC ("2025-01-01 10:00:05").
    started_at: str | None
    # The machine it ran on (machines.name): a container's hostname would make each run a machine.
    machine: str | None
    row: Row

    def value(self, column: str) -> Any:
        """A column of the table: the entry's own (session, started_at in UTC, machine), else its row's."""
        return getattr(self, column) if column in OWN else getattr(self.row, column)


@dataclass
class History:
    rows: list[Entry]
    # The sessions left out, each its file (or folder) and why: `skipped: <path>: <reason>`.
    skipped: list[Malformed]
    sessions: int
