"""How the kit's tasks are made: errors as one line, never a traceback (`friendly`), and flags from
RunOptions: invoke reads a task's flags from its function signature, so the tasks that run recipes
get theirs from the RunOptions fields they take (defaults and help), and each task body receives a
filled `RunOptions` (`options_task`).

Flags as a command-line user expects them (`task`, `_help_for`): no short flag invoke would make
up from a name's letters (`-v` was --variant, `-t` --data, `-y` --dry-run), only the chosen ones
(SHORT_FLAGS); a flag that takes a value is shown with it in --help (`--threshold=NUMBER`,
`--variant=STRING`, repeatable ones said so), whatever its type; a flag's old name (FLAG_ALIASES:
`--out` of `--results`) still taken by every task that has the flag, saying on stderr that it is one.
The installed `reprokit` command exits 2 on a usage error (cli.py); `inv`, invoke's own program,
keeps invoke's 1.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from typing import Any

from invoke import Exit
from invoke import task as invoke_task
from invoke.parser import ParserContext

from reprokit.cli import settings
from reprokit.cli.options import OPTIONS, RunOptions, default_of
from reprokit.cli.positionals import OptionalPositionals
from reprokit.contract import files
from reprokit.contract.errors import ReprokitError
from reprokit.contract.invocation import command
from reprokit.contract.textsafe import line

HELP_WORDS = ("-h", "--help")
# The only short flags: chosen, never derived from a flag's first free letter.
SHORT_FLAGS = {"quiet": "q"}
# Old names of flags, still taken where the flag is: old -> new. `--results` is the results folder's one
# name (the settings key, the default folder, every results task's); `--out` was the running tasks'.
FLAG_ALIASES = settings.OLD_NAMES
# How --help shows the value of a flag whose type invoke leaves unnamed (it names str and int only).
PLACEHOLDERS = {float: "NUMBER", list: "STRING"}


class KitTask(OptionalPositionals):
    """A task whose short flags are the chosen ones alone, whose flags' old names (FLAG_ALIASES) are
    still taken, and whose positionals may have fallbacks (positionals.py)."""

    def __init__(self, body: Any, *args: Any, help: dict[str, str] | None = None, **kwargs: Any) -> None:  # noqa: A002 - invoke's own word
        body, help = _with_aliases(body, help)
        super().__init__(body, *args, help=help, **kwargs)

    def get_arguments(self, ignore_unknown_help: bool | None = None) -> list[Any]:
        # invoke hands each flag's help over by popping it from the task's: a second parser of the same
        # task (print_help's, for `reprokit TASK --help` where --help filled the positional) had none.
        kept = dict(self.help)
        try:
            return super().get_arguments(ignore_unknown_help)
        finally:
            self.help = kept

    def arg_opts(self, name: str, default: Any, taken_names: set[str]) -> dict[str, Any]:
        opts = super().arg_opts(name, default, taken_names)
        short = SHORT_FLAGS.get(name.rstrip("_"))
        if short and short not in taken_names:
            opts["names"] = [*opts["names"], short]
        return opts


def _with_aliases(body: Any, help: dict[str, str] | None) -> tuple[Any, dict[str, str] | None]:  # noqa: A002
    """`body` taking, beside each flag it has, that flag's old name (a parameter of its own, so that
    which name was used is known): said on stderr to be an old name, and refused beside the new one
    when the two disagree. Its help says so too."""
    signature = inspect.signature(body)
    aliases = {
        old: new
        for old, new in FLAG_ALIASES.items()
        if new in signature.parameters and old not in signature.parameters
    }
    if not aliases:
        return body, help
    params = list(signature.parameters.values())
    params += [
        inspect.Parameter(old, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None) for old in aliases
    ]
    help = {
        **(help or {}),
        **{
            old: f"the old name of --{new} (an alias: taken as --{new}, and said so)"
            for old, new in aliases.items()
        },
    }

    @functools.wraps(body)
    def aliased(*args: Any, **kwargs: Any) -> Any:
        for old, new in aliases.items():
            given = kwargs.pop(old, None)
            if given is None:
                continue
            if kwargs.get(new) not in (None, given):
                raise Exit(
                    f"reprokit: --{old} {line(given)} and --{new} {line(kwargs[new])}: give it once, "
                    f"as --{new} (--{old} is its old name)",
                    code=2,
                )
            kwargs[new] = given
            if not kwargs.get("quiet"):
                print(
                    f"reprokit: --{old} is the old name of --{new}: taken as --{new} {line(given)}",
                    file=sys.stderr,
                )
        return body(*args, **kwargs)

    aliased.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    return aliased, help


def task(*args: Any, **kwargs: Any) -> Any:
    """invoke's @task, making KitTasks without invoke's automatic short flags."""
    kwargs.setdefault("klass", KitTask)
    kwargs.setdefault("auto_shortflags", False)
    return invoke_task(*args, **kwargs)


_invoke_help_for = ParserContext.help_for


def _help_for(self: ParserContext, flag: str) -> tuple[str, str]:
    """invoke's flag spec for --help, with the value of a float or repeatable flag shown as invoke shows
    a string's (its own names only str and int, so `--threshold` and `--variant` read as switches)."""
    names, text = _invoke_help_for(self, flag)
    arg = self.flags[flag]
    placeholder = PLACEHOLDERS.get(arg.kind)
    if placeholder is None or not arg.takes_value:
        return names, text
    shown = ", ".join(
        f"{n} {placeholder}" if len(n.strip("-")) == 1 else f"{n}={placeholder}"
        for n in sorted(self.names_for(flag), key=len)
    )
    return shown, text + (" (repeatable)" if arg.kind is list and "repeatable" not in text else "")


# invoke builds its parser contexts itself (the loader copies a tasks module's collection into its own
# Collection), so the help of `inv` and `reprokit` alike is fixed where it is made.
ParserContext.help_for = _help_for  # type: ignore[method-assign]


def print_help(module: str, task_name: str) -> None:
    """A task's --help, as `inv --help TASK` prints it. Needed where the task takes a positional
    argument: invoke gives a missing positional the next word, `--help` included."""
    from invoke import Collection, Program

    binary = "inv" if command() == "inv" else "reprokit"
    namespace = Collection.from_module(sys.modules[module])
    Program(namespace=namespace, binary=binary).run([binary, "--help", task_name], exit=False)


def friendly(fn):
    """Kit errors become one line on stderr and an exit code; never a traceback. A positional
    argument that is `--help` prints the task's help."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        positional = args[1] if len(args) > 1 else next(iter(kwargs.values()), None)
        if positional in HELP_WORDS:
            print_help(fn.__module__, fn.__name__.rstrip("_").replace("_", "-"))
            return None
        # Nothing a task writes (results, run directories, a trainer's files) is group- or
        # other-writable, whatever the caller's umask.
        files.restrict_umask()
        try:
            return fn(*args, **kwargs)
        except ReprokitError as exc:
            # One line, whatever a file or a folder's name put in it (a newline, an ESC sequence).
            raise Exit(f"reprokit: {line(exc)}", code=exc.exit_code) from None
        except BrokenPipeError:
            # The reader went away (`inv recipes | head`): stop quietly, as a command-line tool does.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise Exit(code=1) from None
        except OSError as exc:
            # A results folder that refuses writes (read-only, full, not the user's) is said in one
            # line naming the path and the errno; any other OSError is a bug and keeps its traceback.
            if not files.is_storage_failure(exc):
                raise
            raise Exit(f"reprokit: cannot write {line(files.describe(exc))}", code=1) from None
        except KeyboardInterrupt:
            raise Exit("reprokit: interrupted; what was measured is kept", code=130) from None

    return wrapper


def options_task(
    names: tuple[str, ...],
    recipe: bool = True,
    recipe_help: str = "a recipe name or a path to a recipe file",
    positional: str = "recipe",
    defaults: dict[str, Any] | None = None,
    extra: dict[str, tuple[Any, str]] | None = None,
    fallback: str | None = None,
    **task_kwargs: Any,
):
    """Make an invoke task of `fn(c, recipe, options, **extra)` whose flags are the RunOptions fields
    `names` and the task's own `extra` ones (name: (default, help)); `recipe`: whether the task takes
    a recipe as its positional argument; `fallback`: what a left-out one means (`all`), else it must
    be given."""
    defaults = defaults or {}
    extra = extra or {}

    def decorate(fn):
        params = [inspect.Parameter("c", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        if recipe:
            params.append(inspect.Parameter(positional, inspect.Parameter.POSITIONAL_OR_KEYWORD))
        for name in names:
            item = OPTIONS[name]
            value = defaults.get(name, default_of(item))
            # invoke makes a list flag of an iterable argument whose default is None.
            params.append(
                inspect.Parameter(
                    name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None if value == [] else value
                )
            )
        for name, (value, _) in extra.items():
            params.append(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=value))
        signature = inspect.Signature(params)

        def body(c, *args, **kwargs):
            bound = signature.bind(c, *args, **kwargs)
            bound.apply_defaults()
            values = dict(bound.arguments)
            values.pop("c")
            given_recipe = values.pop(positional, None)
            own = {name: values.pop(name) for name in extra}
            options = RunOptions(
                **{
                    k: ([] if v is None and OPTIONS[k].metadata.get("iterable") else v)
                    for k, v in values.items()
                }
            )
            if options.quiet:
                from reprokit.contract.console import console

                console.quiet = True  # messages and progress; the result and errors still print
            return fn(c, given_recipe, options, **own)

        body.__signature__ = signature  # type: ignore[attr-defined]
        body.__name__, body.__doc__, body.__module__ = fn.__name__, fn.__doc__, fn.__module__
        helps = {name: OPTIONS[name].metadata["help"] for name in names}
        helps.update({name.rstrip("_"): text for name, (_, text) in extra.items()})
        if recipe:
            helps[positional] = recipe_help
        if recipe and fallback is not None:
            task_kwargs.update(fallbacks={positional: fallback})
        return task(
            body,
            help=helps,
            iterable=[n for n in names if OPTIONS[n].metadata.get("iterable")],
            positional=[positional] if recipe else [],
            **task_kwargs,
        )

    return decorate
