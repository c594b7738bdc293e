"""`inv` in a checkout: the kit's tasks (reprokit/cli/tasks.py), the same as the installed `reprokit` command."""

from reprokit.cli.tasks import ns  # noqa: F401  (invoke looks for `ns` here)
