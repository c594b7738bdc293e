"""A task's positional argument that a user may leave out: `inv preflight` meaning `inv preflight all`,
`inv history --results DIR` every recipe, `inv reproduce --resume latest` the session's own recipes.

invoke fills a task's positional arguments from the bare words after its name, and refuses a task
whose positional argument got none; an argument with a default is never filled from a bare word. A
task made with `klass=OptionalPositionals` names its positionals' fallbacks: they stay positional (a
bare word fills them), and one left out takes its fallback when invoke completes the task's
arguments, before invoke's check that every positional argument was given.
"""

from __future__ import annotations

from typing import Any

from invoke import Task
from invoke.parser import parser as invoke_parser


class OptionalPositionals(Task):
    """An invoke Task whose positional arguments named in `fallbacks` may be left out."""

    def __init__(self, *args: Any, fallbacks: dict[str, str] | None = None, **kwargs: Any) -> None:
        self.fallbacks = dict(fallbacks or {})
        super().__init__(*args, **kwargs)

    def get_arguments(self, ignore_unknown_help: bool | None = None) -> list[Any]:
        arguments = super().get_arguments(ignore_unknown_help)
        for argument in arguments:
            if argument.name in self.fallbacks:
                argument.fallback = self.fallbacks[argument.name]
        return arguments


_complete_context = invoke_parser.ParseMachine.complete_context


def _completed_with_fallbacks(machine: Any) -> None:
    """invoke's own completion of a task's arguments, once each left-out positional has its fallback."""
    for argument in machine.context.positional_args if machine.context else []:
        fallback = getattr(argument, "fallback", None)
        if argument.value is None and fallback is not None:
            argument.set_value(fallback, cast=False)
    _complete_context(machine)


if getattr(invoke_parser.ParseMachine.complete_context, "__name__", "") != _completed_with_fallbacks.__name__:
    invoke_parser.ParseMachine.complete_context = _completed_with_fallbacks
