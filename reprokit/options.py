"""The one options object of `run`, `reproduce` and `render`, and how a task is made from it.

invoke reads a task's flags from its function signature; the tasks that run recipes share most of
theirs, so their signatures are made here from one dataclass (its fields' defaults and help), and
each task body receives a filled `RunOptions`. Site settings (settings.py) fill what no flag gave.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from invoke import Task, task
from invoke.parser import Argument


def _opt(default: Any, help: str, **extra: Any) -> Any:  # noqa: A002 - invoke's own word
    if isinstance(default, list):
        return field(default_factory=list, metadata={"help": help, **extra})
    return field(default=default, metadata={"help": help, **extra})


@dataclass
class RunOptions:
    accelerator: str = _opt("auto", "cuda, gaudi2, cpu or auto (detect this machine's; default)")
    scale: str = _opt(
        "auto", "published, smoke or auto (published with an accelerator, smoke without; default)"
    )
    runtime: str = _opt(
        None, "where cells run: local or slurm (default: local; `docker` is local in Docker)", setting=True
    )
    container: str = _opt(
        None,
        "what they run in: none, docker, pyxis, apptainer or auto (local: docker when an engine answers and "
        "the image is built; slurm: pyxis on GPUs; default auto)",
        setting=True,
    )
    variant: list[str] = _opt(
        [], "run only this variant (repeatable); `inv show RECIPE` lists them", iterable=True
    )
    out: str = _opt(None, "folder to write into (default: results/, rendered/ for render)", setting="results")
    devices: str = _opt(
        None, "devices per node (default: the published count, capped at what this machine has)"
    )
    nodes: str = _opt(
        None,
        "nodes (Slurm); a list such as 1,2 runs every cell at each count and reports the scaling efficiency",
    )
    data: list[str] = _opt(
        [],
        "KEY=PATH: a recipe's real data (e.g. imagenet=/data/imagenet; repeatable; `inv show` lists keys)",
        iterable=True,
        setting=True,
    )
    recipes: list[str] = _opt(
        [], "a folder of your own recipes, searched after the kit's (repeatable)", iterable=True, setting=True
    )
    partition: str = _opt(None, "Slurm partition to submit to (default: the cluster's default)", setting=True)
    account: str = _opt(None, "Slurm account to charge", setting=True)
    time_limit: str = _opt(
        None, "Slurm time limit per cell job (sbatch --time: minutes or [D-]HH:MM:SS)", setting=True
    )
    exclusive: bool = _opt(
        True, "whole nodes per Slurm job (default); --no-exclusive shares them", setting=True
    )
    image: str = _opt(
        None,
        "image to run in: a tag (docker), a squashfs/.sif or image reference (pyxis, apptainer)",
        setting=True,
    )
    repeat: int = _opt(1, "run each cell this many times: results give the median, min, max and spread")
    timeout: str = _opt(
        None, "seconds allowed per cell before it is stopped and recorded as timed out", setting=True
    )
    resume: str = _opt(
        None, "a session to finish (name or folder): reruns its stored plan, keeping complete cells"
    )
    dry_run: bool = _opt(False, "print what would run, and run nothing")
    profile: bool = _opt(
        False,
        "trace a few steps of every cell after its warm-up with torch.profiler (runs/<cell>/profile/, "
        "linked from the report)",
    )

    def given(self) -> dict[str, Any]:
        """The options that differ from their defaults (what a user or a setting said)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != _default(f)}


def _default(item) -> Any:
    return item.default_factory() if item.default_factory is not MISSING else item.default


OPTIONS = {item.name: item for item in fields(RunOptions)}
# The options that choose and direct the runtime and its container platform, passed on by name.
PLUGIN_OPTIONS = ("partition", "account", "time_limit", "exclusive", "image", "user")
RUN_FIELDS = tuple(OPTIONS)
RENDER_FIELDS = tuple(name for name in OPTIONS if name not in ("timeout", "resume", "dry_run", "repeat"))


class OptionalPositional(Argument):
    """A positional argument that may be left out (reproduce: all recipes).

    invoke's parser asks whether a positional argument is missing twice: to take the next bare word
    as its value (wanted: `inv reproduce bridgetower`), and when the command line ends, to refuse a
    missing one (not wanted: `inv reproduce`). Only the second question is answered differently."""

    @property
    def value(self) -> Any:
        found = super().value
        if found is None and _asked_at_the_end():
            return ""
        return found

    @value.setter
    def value(self, arg: str) -> None:
        self.set_value(arg, cast=True)


def _asked_at_the_end() -> bool:
    frame = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            return False
        if frame.f_code.co_name == "complete_context":
            return True
        frame = frame.f_back
    return False


class KitTask(Task):
    def __init__(self, *args: Any, optional_positional: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.optional_positional = frozenset(optional_positional)

    def get_arguments(self, ignore_unknown_help: bool | None = None) -> list[Argument]:
        arguments = super().get_arguments(ignore_unknown_help)
        for argument in arguments:
            if argument.name in self.optional_positional:
                argument.__class__ = OptionalPositional
        return arguments


def options_task(
    names: tuple[str, ...],
    recipe: str | None = None,
    recipe_help: str = "a recipe name or a path to a recipe file",
    defaults: dict[str, Any] | None = None,
    extra: dict[str, tuple[Any, str]] | None = None,
    **task_kwargs: Any,
):
    """Make an invoke task of `fn(c, recipe, options, **extra)` whose flags are the RunOptions fields
    `names` and the task's own `extra` ones (name: (default, help)); `recipe` is "required",
    "optional" or None (no recipe argument)."""
    defaults = defaults or {}
    extra = extra or {}

    def decorate(fn):
        params = [inspect.Parameter("c", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        if recipe:
            params.append(inspect.Parameter("recipe", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None))
        for name in names:
            item = OPTIONS[name]
            value = defaults.get(name, _default(item))
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
            given_recipe = values.pop("recipe", None)
            own = {name: values.pop(name) for name in extra}
            options = RunOptions(
                **{
                    k: ([] if v is None and OPTIONS[k].metadata.get("iterable") else v)
                    for k, v in values.items()
                }
            )
            return fn(c, given_recipe, options, **own)

        body.__signature__ = signature  # type: ignore[attr-defined]
        body.__name__, body.__doc__, body.__module__ = fn.__name__, fn.__doc__, fn.__module__
        helps = {name: OPTIONS[name].metadata["help"] for name in names}
        helps.update({name.rstrip("_"): text for name, (_, text) in extra.items()})
        if recipe:
            helps["recipe"] = recipe_help
        return task(
            body,
            klass=KitTask,
            help=helps,
            iterable=[n for n in names if OPTIONS[n].metadata.get("iterable")],
            positional=["recipe"] if recipe else [],
            optional_positional=("recipe",) if recipe == "optional" else (),
            **task_kwargs,
        )

    return decorate
