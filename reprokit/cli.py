"""The `reprokit` command (and `python -m reprokit`): the kit's tasks as an installed tool."""

from __future__ import annotations

from invoke import Program

from reprokit import __version__
from reprokit.settings import KitConfig
from reprokit.tasks import ns

program = Program(
    name="reprokit", binary="reprokit", version=__version__, namespace=ns, config_class=KitConfig
)


def main() -> None:
    program.run()
