"""The kit's terminal: messages, progress and tables on stderr, so stdout carries only what a task
prints as its result (a path, a tag, JSON)."""

from __future__ import annotations

from rich.console import Console

console = Console(stderr=True, highlight=False, soft_wrap=True)
