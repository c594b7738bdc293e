"""How the user runs the kit, so that a hint names a command that works for them: `inv` in a
checkout, `reprokit` when installed, `python -m reprokit`."""

from __future__ import annotations

import sys
from pathlib import Path


def command() -> str:
    program = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("reprokit")
    if program.name in ("inv", "invoke") or program.parent.name == "invoke":
        return "inv"
    if program.name == "__main__.py":
        return "python -m reprokit"
    return "reprokit"
