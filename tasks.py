"""`inv` in a checkout: the kit's tasks (reprokit/tasks.py), the same as the installed `reprokit` command."""

from reprokit.tasks import ns  # noqa: F401  (invoke looks for `ns` here)
