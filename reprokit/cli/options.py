"""The one options object of `run`, `reproduce` and `render`, and the one place its values are read.

The tasks that run recipes share their flags: one dataclass holds them (defaults and help; tasking.py
makes the tasks' signatures from it). Site settings (settings.py) fill what no flag gave, and
`request()` turns the result into the planner's `Request`, checking every value on the way: a bad
one is a one-line error naming the flag and what to give, never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

from reprokit.cli import settings
from reprokit.contract import files
from reprokit.contract.errors import ReprokitError
from reprokit.contract.textsafe import line
from reprokit.plan import accelerators, data, recipes
from reprokit.plan.request import Request

T = TypeVar("T")
# Bounds on the flags that set how long a session takes, with the reason each one says.
MAX_REPEAT = 100
REPEAT_WHY = "the median of more runs says nothing new, and each run is the whole cell again"
MAX_TIMEOUT_S = 30 * 24 * 3600
TIMEOUT_WHY = "longer than any published run: a cell still running after 30 days is stuck"
# The one flag of the results folder, in every task that reads or writes sessions (its old name, --out,
# is an alias: tasking.FLAG_ALIASES).
RESULTS_HELP = "the results folder: sessions are made and looked up in it (default: the `results` setting, else results/)"


# The one help text of --accelerator, from the accelerators found (every task that takes the flag).
ACCELERATOR_HELP = accelerators.flag_help()


def _opt(default: Any, help: str, **extra: Any) -> Any:  # noqa: A002 - invoke's own word
    if isinstance(default, list):
        return field(default_factory=list, metadata={"help": help, **extra})
    return field(default=default, metadata={"help": help, **extra})


@dataclass
class RunOptions:
    accelerator: str = _opt("auto", ACCELERATOR_HELP)
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
    results: str = _opt(None, RESULTS_HELP, setting="results")
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
    repeat: str = _opt(None, "run each cell this many times: results give the median, min, max and spread")
    timeout: str = _opt(
        None, "seconds allowed per cell before it is stopped and recorded as timed out", setting=True
    )
    resume: str = _opt(
        None, "a session to finish (name or folder): reruns its stored plan, keeping complete cells"
    )
    dry_run: bool = _opt(
        False,
        "print what would run and the preflight's quick checks of it (no steps), and run nothing; exits 3 "
        "where they would refuse a cell",
    )
    reference: str = _opt(
        None,
        "judge against this release's figures (its id or release, as `inv show RECIPE` lists them; default: "
        "the publication's)",
    )
    quiet: bool = _opt(False, "print only the result and errors: no progress bars, no messages")
    profile: bool = _opt(
        False,
        "trace a few steps of every cell after its warm-up with torch.profiler (runs/<cell>/profile/, "
        "linked from the report)",
    )

    def given(self) -> dict[str, Any]:
        """The options that differ from their defaults (what a user or a setting said)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != default_of(f)}


def default_of(item) -> Any:
    return item.default_factory() if item.default_factory is not MISSING else item.default


OPTIONS = {item.name: item for item in fields(RunOptions)}
# The options that choose and direct the runtime and its container platform, passed on by name.
PLUGIN_OPTIONS = ("partition", "account", "time_limit", "exclusive", "image")
RUN_FIELDS = tuple(OPTIONS)
# render writes no session: its folder is its own --out (tasks.py), not the results folder.
RENDER_FIELDS = tuple(
    name for name in OPTIONS if name not in ("timeout", "resume", "dry_run", "repeat", "results")
)
# What a preflight takes: the session `reproduce` would run (it runs nothing of it but a few steps).
PREFLIGHT_FIELDS = tuple(name for name in OPTIONS if name not in ("resume", "dry_run", "repeat"))
# What a resumed session may be given: where results go, how long a cell may take, the plug-ins' options.
RESUME_FIELDS = (
    "results",
    "timeout",
    "partition",
    "account",
    "time_limit",
    "exclusive",
    "image",
    "dry_run",
    "quiet",
)


def with_settings(options: RunOptions) -> tuple[RunOptions, settings.Settings]:
    """Options with the site settings filling what no flag gave; the recipe folders put to use."""
    site = settings.load()
    filled = replace(
        options,
        runtime=options.runtime or site.get("runtime", "auto"),
        container=options.container or site.get("container", "auto"),
        results=options.results or site.get("results"),
        partition=options.partition or site.get("partition"),
        account=options.account or site.get("account"),
        time_limit=options.time_limit or site.get("time_limit"),
        exclusive=options.exclusive and bool(site.get("exclusive", True)),
        image=options.image or site.get("image"),
        timeout=options.timeout or site.get("timeout"),
        recipes=[*site.get("recipes", []), *options.recipes],
    )
    recipes.use_dirs(filled.recipes)
    if filled.results:
        writable_folder(filled.results, "--results" if options.results else "the `results` setting")
    return filled, site


def writable_folder(out: str, given_as: str) -> None:
    """A folder the kit can make its session (or rendered) folders in, checked before anything runs:
    else one line naming it and why (a file, /proc, a read-only mount, no permission)."""
    if Path(out).exists() and not Path(out).is_dir():
        raise ReprokitError(f"{given_as} {line(out)}: a file is there; give a folder to write into")
    why = files.cannot_make_folders_in(Path(out))
    if why is not None:
        raise ReprokitError(
            f"{given_as} {line(out)}: the kit cannot make a folder there ({line(why)}); "
            "give a folder it can write into"
        )


def _parsed(value: Any, convert: Callable[[Any], T], problem: str) -> T | None:
    """A flag's value converted; None where it was not given, and `problem` as the one-line error
    where it does not convert."""
    if value in (None, ""):
        return None
    try:
        return convert(value)
    except (TypeError, ValueError):
        raise ReprokitError(problem) from None


def count(flag: str, value: Any, what: str, most: int | None = None, why: str = "") -> int | None:
    """A whole number of at least 1 (--devices, --repeat), at most `most` (for `why`), or None where
    not given."""
    found = _parsed(value, int, f"{flag} {value}: give {what} (a whole number, 1 or more)")
    if found is not None and found < 1:
        raise ReprokitError(f"{flag} {value}: give {what} (a whole number, 1 or more)")
    if found is not None and most is not None and found > most:
        raise ReprokitError(f"{flag} {value}: at most {most} ({why})")
    return found


def node_counts(value: Any) -> int | list[int] | None:
    """--nodes 2, or a list 1,2 (each cell at each count)."""
    counts = _parsed(
        value,
        lambda text: [int(part) for part in str(text).split(",")],
        f"--nodes {value}: give a number of nodes, or a list such as 1,2",
    )
    if counts is None:
        return None
    if any(n < 1 for n in counts) or len(set(counts)) != len(counts):
        raise ReprokitError(f"--nodes {value}: node counts must be distinct and at least 1")
    return counts[0] if len(counts) == 1 else counts


def seconds(flag: str, value: Any, most: float = MAX_TIMEOUT_S, why: str = TIMEOUT_WHY) -> float | None:
    """Seconds above 0 and at most `most` (inf, NaN and 1e400 are not seconds: session.json holds JSON)."""
    found = _parsed(value, float, f"{flag} {value}: give seconds")
    if found is not None and not found > 0:
        raise ReprokitError(f"{flag} {value}: give a number of seconds above 0")
    if found is not None and not found <= most:  # NaN fails this too
        raise ReprokitError(f"{flag} {value}: at most {most:,.0f} seconds ({why})")
    return found


def recipe_names(given: str | None) -> list[str]:
    """The recipe argument: `all` (every recipe), one name or path, or several separated by commas."""
    if not given or given == "all":
        return []
    return [name for name in given.split(",") if name]


def request(names: list[str], options: RunOptions, site: settings.Settings) -> Request:
    """The planner's input from the flags (and the settings that filled them), every value checked."""
    plugin_options = {key: getattr(options, key) for key in PLUGIN_OPTIONS if key in options.given()}
    return Request(
        recipes=names,
        accelerator=options.accelerator,
        scale=options.scale,
        runtime=options.runtime,
        container=options.container,
        variants=list(options.variant),
        devices=count("--devices", options.devices, "devices per node"),
        nodes=node_counts(options.nodes),
        timeout=seconds("--timeout", options.timeout),
        runtime_options=plugin_options,
        settings=site.record(),
        data={**site.get("data", {}), **data.parse(options.data)},
        repeat=count("--repeat", options.repeat, "how many times to run each cell", MAX_REPEAT, REPEAT_WHY)
        or 1,
        profile=bool(options.profile),
        reference=options.reference or None,
    )
