"""What the user asked for, before anything was resolved: the one input of planning.

The command line's flags and the site settings become a `Request` once (reprokit/cli/tasks.py); the
planner turns it into cells, and session.json stores it, so that `--resume SESSION` plans the same
cells again without the flags.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Request:
    recipes: list[str] = field(default_factory=list)
    accelerator: str = "auto"
    scale: str = "auto"
    runtime: str = "auto"
    container: str = "auto"
    variants: list[str] = field(default_factory=list)
    devices: int | None = None
    # One count, or a list: every cell at each count (the report's scaling efficiency).
    nodes: int | list[int] | None = None
    timeout: float | None = None
    # The runtime's and the container platform's options (--partition, --image, ...), by name.
    runtime_options: dict[str, Any] = field(default_factory=dict)
    # Site settings in effect (reprokit.yaml, REPROKIT_* variables), recorded with their sources.
    settings: dict[str, Any] = field(default_factory=dict)
    # The user's real data: --data KEY=PATH (and the `data` setting).
    data: dict[str, str] = field(default_factory=dict)
    # Runs of each cell (--repeat N): results give their median and spread.
    repeat: int = 1
    # --profile: every cell traces a few steps with torch.profiler.
    profile: bool = False
    # --reference: the release whose figures judge the cells (an id or its release; None: the publication's).
    reference: str | None = None
