"""The `reprokit` command (and `python -m reprokit`): the kit's tasks as an installed tool."""

from __future__ import annotations

from invoke import Exit, ParseError, Program

from reprokit import __version__
from reprokit.cli.tasks import ns

USAGE_ERROR = 2  # what command-line tools exit with on a usage error (argparse, getopt's convention)


class KitProgram(Program):
    """invoke's Program, a usage error (an unknown flag, a missing value, an unknown task) exiting 2."""

    def parse_core(self, argv):  # type: ignore[no-untyped-def]
        try:
            super().parse_core(argv)
        except ParseError as error:
            raise Exit(f"reprokit: {error}", code=USAGE_ERROR) from None

    def parse_tasks(self) -> None:
        try:
            super().parse_tasks()
        except ParseError as error:
            raise Exit(f"reprokit: {error}", code=USAGE_ERROR) from None

    def parse_cleanup(self) -> None:
        try:
            super().parse_cleanup()
        except ParseError as error:
            raise Exit(f"reprokit: {error}", code=USAGE_ERROR) from None


# invoke's own configuration is left as `inv` has it: the kit's settings are read by settings.py.
program = KitProgram(name="reprokit", binary="reprokit", version=__version__, namespace=ns)


def main() -> None:
    program.run()
