"""The `reprokit` command (and `python -m reprokit`): the kit's tasks as an installed tool."""

from __future__ import annotations

from invoke import Program

from reprokit import __version__
from reprokit.tasks import ns

# invoke's own configuration is left as `inv` has it: the kit's settings are read by settings.py.
program = Program(name="reprokit", binary="reprokit", version=__version__, namespace=ns)


def main() -> None:
    program.run()
