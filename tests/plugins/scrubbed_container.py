"""A container platform plug-in, whole: no image, but run.sh never sees the named host variables."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from reprokit.run.containers.base import LOCAL, SRUN, Container, Launch
from reprokit.run.containers.none import environment


@dataclass(frozen=True)
class ScrubbedOptions:
    scrub: tuple[str, ...] = field(default=("HF_TOKEN",))


class Scrubbed(Container):
    name = "scrubbed"
    options_class = ScrubbedOptions
    launches = frozenset({LOCAL, SRUN})

    def launch(self, cell, run_dir: Path, profile, how: str, mount: Path) -> Launch:
        prefix = ["env", *(f"--unset={name}" for name in self.options.scrub)]
        return Launch(prefix=prefix, env=environment(run_dir) if how == LOCAL else {})
