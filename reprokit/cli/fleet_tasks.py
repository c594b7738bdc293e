"""`accept`: a fleet acceptance run (reprokit/fleet/): the same cell on every node of a partition, or
on each device of this machine alone, each node judged against the publication and its siblings."""

from __future__ import annotations

from reprokit.cli.options import RunOptions, request, with_settings
from reprokit.cli.tasking import friendly, options_task
from reprokit.contract.errors import ReprokitError, RunFailed

ACCEPT_FIELDS = ("accelerator", "scale", "runtime", "container", "variant", "results", "data", "recipes",
                 "partition", "account", "time_limit", "exclusive", "image", "repeat", "timeout", "quiet")  # fmt: skip


def _number(flag: str, value, low: float, high: float, default: float) -> float:
    """A flag's number within [low, high] (invoke would convert a float flag's text with a traceback)."""
    if value is None:
        return default
    try:
        found = float(value)
    except (TypeError, ValueError):
        found = float("nan")
    if not low <= found <= high:  # NaN fails too
        raise ReprokitError(f"{flag} {value}: give a number from {low:g} to {high:g}")
    return found


@options_task(
    ACCEPT_FIELDS,
    extra={
        "nodelist": (
            None,
            "the nodes to accept, in Slurm's syntax (n[1-8],gpu12); default: every node of --partition",
        ),
        "per_device": (
            False,
            "on this machine: the one-device cell on each device alone, in turn (--runtime local)",
        ),
        "deviations": (
            None,
            "k: how many robust deviations (1.4826 x MAD of the other nodes) below their median is slow "
            "(default 3)",
        ),
        "pairs": (
            False,
            "then the collective between neighbouring nodes (a ring of two-node jobs: all-reduce bus bandwidth), "
            "each pair held to the others by the same rule",
        ),
        "min_gap": (None, "the least gap below the other nodes' median that is slow (default 0.10: 10%)"),
    },  # fmt: skip
)
@friendly
def accept(
    c,
    recipe,
    options: RunOptions,
    nodelist=None,
    per_device=False,
    deviations=None,
    min_gap=None,
    pairs=False,
):
    """Run one cell on every node (one Slurm job each, at once) or, with --per-device, on each device of
    this machine alone, then judge each: against the published figure per device where the cell has
    one, and against the other nodes' median (slow when below it by more than max(--deviations x 1.4826 x MAD,
    --min-gap)), each slow node with what its run measured that explains it, each failed one with its
    error. Writes acceptance.html, acceptance.json (reprokit/schemas/acceptance.schema.json) and
    acceptance.xml (JUnit) in the session, prints the table worst first and the `scontrol update ...
    state=drain` commands for the failing nodes (never run); exits 1 when any node (or, with --pairs, any
    pair) is slow or failed."""
    from reprokit.fleet.accept import accept as accepting
    from reprokit.fleet.judging import MIN_GAP, K, Rule

    rule = Rule(
        _number("--deviations", deviations, 0.0, 100.0, K), _number("--min-gap", min_gap, 0.0, 1.0, MIN_GAP)
    )
    options, site = with_settings(options)
    found = accepting(
        request([recipe], options, site), options.results, bool(per_device), nodelist, rule, bool(pairs)
    )
    said = []
    if found.failing:
        names = ", ".join(f"{v.target} ({v.status})" for v in found.failing)
        said.append(f"{len(found.failing)} of {len(found.verdicts)} {found.mode}(s) failing: {names}")
    if found.failing_pairs:
        names = ", ".join(f"{v.pair} ({v.status})" for v in found.failing_pairs)
        said.append(f"{len(found.failing_pairs)} of {len(found.pairs)} pair(s) failing: {names}")
    if said:
        raise RunFailed("; ".join(said))
