"""One acceptance run (`inv accept`): plan the one cell, run it on every node (or device) as a session
of its own, collect it as any session is collected, judge each node, write the table, page, JSON and
JUnit XML, and print the drain commands. The session is an ordinary one: `inv history` shows each node
as its own series and machine, `inv compare A B` names the nodes whose figure changed."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path

from rich.markup import escape

from reprokit.collect import collect
from reprokit.contract import files, sessions
from reprokit.contract.console import console
from reprokit.contract.errors import ReprokitError
from reprokit.fleet import launch, outputs, targets
from reprokit.fleet import pairs as pair_check
from reprokit.fleet.cells import one_cell, per_target
from reprokit.fleet.judging import DEFAULT_RULE, NodeVerdict, Rule, judge
from reprokit.plan import accelerators
from reprokit.plan.cells import Cell
from reprokit.plan.request import Request
from reprokit.report import report
from reprokit.run import machinelock, session, supervise
from reprokit.run.containers.base import LOCAL
from reprokit.run.placement import plan
from reprokit.run.plugin_options import runtime_for
from reprokit.run.runtimes.slurm import SlurmRuntime

# Where the pairs' jobs go: beside runs/, which collect reads as the cells' run directories.
PAIRS = "pairs"


def _targets(request: Request, runtime, per_device: bool, nodelist: str | None, accelerator: str):
    if per_device:
        if runtime.launches != LOCAL:
            raise ReprokitError("--per-device runs each device of this machine alone: --runtime local")
        if runtime.container.name == "docker":
            # Docker's own --gpus decides what its container sees, not the visibility variable.
            raise ReprokitError(
                "--per-device sets each run's visible device, which a Docker container does not take from "
                "the kit: --container none (or apptainer)"
            )
        return targets.devices(accelerator), "device"
    if not isinstance(runtime, SlurmRuntime):
        raise ReprokitError(
            "an acceptance run over nodes runs one Slurm job per node: --runtime slurm (with --partition or "
            "--nodelist); on this machine alone, --per-device runs each device in turn"
        )
    return targets.slurm_nodes(request.runtime_options.get("partition"), nodelist), "node"


def accept(
    request: Request,
    out: str | None,
    per_device: bool = False,
    nodelist: str | None = None,
    rule: Rule = DEFAULT_RULE,
    check_pairs: bool = False,
) -> outputs.Acceptance:
    """Run the acceptance session (and, `check_pairs`, the collective between neighbouring nodes);
    returns what it found (the caller decides the exit code)."""
    if per_device and check_pairs:
        raise ReprokitError(
            "--pairs measures the collective between nodes; --per-device runs on this machine alone"
        )
    if per_device:
        request = replace(request, devices=1)
    elif request.nodes not in (None, 1):
        raise ReprokitError(f"--nodes {request.nodes}: an acceptance run runs its cell on one node per job")
    the_plan = plan(request)
    cells = one_cell(the_plan)
    runtime = runtime_for(the_plan, request.runtime_options)
    found, mode = _targets(request, runtime, per_device, nodelist, the_plan.accelerator)
    if check_pairs and len(found) < 2:
        raise ReprokitError(f"--pairs measures the collective between nodes: {len(found)} node(s) to accept")
    placed = per_target(cells, found)
    if nodelist is None and mode == "node":
        runtime.where(cells)  # the partition: there and up, in sinfo's words
    for message in the_plan.messages:
        console.print(message)
    profile = accelerators.get(the_plan.accelerator)
    runtime.check(profile)
    session_dir = session.new_dir(out)
    the_plan.cells = [cell for _, cell in placed]
    session.save(session_dir, the_plan, request)
    _mark(session_dir, mode, found, rule)
    base = cells[0].series_id or cells[0].cell_id
    console.print(
        f"Session: {session_dir}\nAccepting {base} on {len(found)} {mode}(s): "
        f"{', '.join(t.name for t in found)}"
        + (" (one Slurm job each, at once)" if mode == "node" else " (each alone, in turn)"),
        highlight=False, markup=False,
    )  # fmt: skip

    def said(target, cell, outcome) -> None:
        console.print(supervise.describe(f"{mode} {target.name}", cell, outcome))

    held = machinelock.held(session_dir, console.print) if mode == "device" else contextlib.nullcontext()
    with held:
        launch.run(
            runtime, placed, profile, session_dir / sessions.RUNS, mode == "node", request.timeout, said
        )
    links = []
    if check_pairs:
        links = pair_check.run(
            runtime, cells[0], profile, found, session_dir / PAIRS, rule, request.timeout,
            lambda v: console.print(f"pair {v.pair}: " + (f"{v.busbw:.3g} GB/s bus bandwidth" if v.busbw is not None
                                                          else f"[red]failed[/red] {escape(str(v.error))}")),
        )  # fmt: skip
    result = outputs.Acceptance(session_dir, base, mode, rule, _verdicts(session_dir, placed, rule), links)
    written = outputs.write(result)
    outputs.print_table(result)
    outputs.say_drains(result)
    console.print(
        f"Acceptance: {written['html']} (JSON {written['json'].name}, JUnit {written['junit'].name})",
        highlight=False, markup=False,
    )  # fmt: skip
    return result


def _verdicts(session_dir: Path, placed: list[tuple[targets.Target, Cell]], rule: Rule) -> list[NodeVerdict]:
    """Each target's verdict from its series' row (the median of its repeats), as collected."""
    by_series = {r.series_id or r.cell_id: r for r in _rows(session_dir)}
    judged = {}
    for target, cell in placed:
        # A target's first run directory names it (its job id, its log): every repeat shares its series.
        judged.setdefault(
            cell.series_id,
            (target, by_series.get(cell.series_id), session_dir / sessions.RUNS / cell.cell_id),
        )
    return judge(list(judged.values()), rule)


def _mark(session_dir: Path, mode: str, found: list[targets.Target], rule: Rule) -> None:
    """session.json says the session is an acceptance run, over which targets and by which rule."""
    saved = sessions.stored(session_dir) or {}
    saved["acceptance"] = {
        "mode": mode,
        "targets": [{"name": t.name, "identity": t.identity} for t in found],
        "rule": {"k": rule.k, "min_gap": rule.min_gap},
    }
    files.write_json(session_dir / sessions.SESSION_FILE, saved)


def _rows(session_dir: Path):
    """The session's rows, with its report written as for any session; where the storage refuses the
    report, the rows read in place (what was measured is judged all the same)."""
    try:
        return report.write(session_dir).table
    except OSError as exc:
        if not files.is_storage_failure(exc):
            raise
        console.print(f"[red]report not written[/red]: {escape(files.describe(exc))}")
        return collect.rows(session_dir)
