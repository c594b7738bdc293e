"""One `inv reproduce`: plan (or resume) a session, run its cells, collect and report.

The tasks only turn flags into a `Request`; what happens to it lives here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.markup import escape

from reprokit.collect import collect, results_folder
from reprokit.contract import files, rundirs, sessions
from reprokit.contract.bounded import Malformed
from reprokit.contract.console import console
from reprokit.contract.errors import DryRunRefused, RunFailed
from reprokit.contract.invocation import command
from reprokit.plan.planner import Plan, trainers_found
from reprokit.plan.request import Request
from reprokit.report import report, terminal
from reprokit.run import session, supervise, supervisor_file
from reprokit.run.placement import plan
from reprokit.run.plugin_options import runtime_for
from reprokit.run.runtimes.base import run_script


def dry_run_text(the_plan: Plan, request: Request, out: str | None, session_dir: Path | None = None) -> str:
    """What would run: each cell's run.sh, and what its runtime and container wrap around it. For a
    resumed session (`session_dir`), only the cells that would run again, in that session's folder;
    the complete ones are named as kept."""
    profile = the_plan.profile
    runtime = runtime_for(the_plan, request.runtime_options)
    where = the_plan.runtime + ("" if the_plan.container == "none" else f" in {the_plan.container}")
    # A new session's folder is named when it starts: SESSION stands for it.
    runs = (session_dir or Path(out or sessions.RESULTS_DIR) / "SESSION").resolve() / sessions.RUNS
    parts: list[str] = []
    kept = [
        c.cell_id for c in the_plan.cells if session_dir is not None and rundirs.is_complete(runs / c.cell_id)
    ]
    if session_dir is not None:
        parts.append(f"# resuming {session_dir.resolve()}")
    if kept:
        parts.append(f"# complete, kept (not rerun): {', '.join(kept)}")
    for cell in the_plan.cells:
        if cell.cell_id in kept:
            continue
        parts.append(f"# {cell.cell_id} ({where}, {cell.scale}, {cell.accelerator})")
        parts.append(run_script(cell, profile))
        wrapping = runtime.dry_run(cell, runs / cell.cell_id, profile)
        if wrapping:
            parts.append(wrapping)
    if session_dir is not None and len(kept) == len(the_plan.cells):
        parts.append(f"# nothing would run: every cell of {session_dir} is complete")
    return "\n".join(parts)


def dry_run_checks(
    the_plan: Plan, request: Request, out: str | None, session_dir: Path | None = None
) -> None:
    """What a dry run ends with: the preflight's quick checks (devices, image, trainers, storage, data;
    no steps) of the cells that would run, its findings and each cell's answer as `inv preflight
    --no-steps` prints them. Raises DryRunRefused (exit 3) where they would refuse a cell."""
    # Imported here: the checks (and what they import) cost every other command nothing.
    from reprokit import preflight

    runs = (session_dir / sessions.RUNS) if session_dir is not None else None
    cells = [c for c in the_plan.cells if runs is None or not rundirs.is_complete(runs / c.cell_id)]
    if not cells:
        return
    # A resumed session writes into its own folder; a new one under the results folder.
    report = preflight.run(request, session_dir or out, steps=False, planned=replace(the_plan, cells=cells))
    steps = f"`{command()} preflight` also steps each trainer"
    print(f"\n# {preflight.describe(request, report)}: the quick checks ({steps})")
    print(report.table())
    refusal = report.refusal()
    if refusal:
        raise DryRunRefused(f"dry run: {refusal}")


def reproduce(request: Request, out: str | None, resume: str | None, dry_run: bool) -> Path | None:
    """Run a new session (or finish `resume`); returns its folder, None for a dry run.

    Raises RunFailed at the end when any cell did not complete: the others ran and were reported.
    """
    if resume:
        # The session's own plan (session.json), so the same cells are rerun without repeating flags.
        passed_over: list[Malformed] = []
        session_dir = results_folder.resolve_session(
            Path(out) if out else sessions.RESULTS_DIR, resume, passed_over, holding=sessions.SESSION_FILE
        )
        for skipped in passed_over:  # latest, previous: the sessions that could not be read or placed
            console.print(skipped.skipped(), markup=False, highlight=False)
        the_plan, request = session.resume_plan(session_dir, request)
    else:
        the_plan = plan(request)
    # A stray option, or a place that is not there (a Slurm partition), is refused before anything runs.
    where = runtime_for(the_plan, request.runtime_options).where(the_plan.cells)
    for message in [*the_plan.messages, *trainers_found(the_plan.cells, the_plan.container)]:
        console.print(message)
    if where:
        console.print(f"Cells go to {where}.")
    if dry_run:
        print(dry_run_text(the_plan, request, out, session_dir if resume else None))
        dry_run_checks(the_plan, request, out, session_dir if resume else None)
        return None
    if resume:
        # A trainer of the session that outlived its kit (kill -9 of the kit) still writes there.
        supervisor_file.refuse_live([session_dir / sessions.RUNS / cell.cell_id for cell in the_plan.cells])
        session.mark_resumed(session_dir)
    else:
        session_dir = session.new_dir(out)
        session.save(session_dir, the_plan, request)
    console.print(f"Session: {session_dir}")
    stopped: str | None = None
    try:
        outcomes = supervise.run_cells(
            the_plan,
            session_dir,
            resume=bool(resume),
            timeout=request.timeout,
            runtime_options=request.runtime_options or None,
            timeout_set_by=_timeout_set_by(request),
        )
    except KeyboardInterrupt:
        # The table and the report as at the end of any session: what the run directories say,
        # interrupted cell included. The interrupt's exit code follows.
        _reported(session_dir)
        console.print(f"Interrupted. Finish the session with: {command()} resume {session_dir}")
        raise
    except supervise.SessionStopped as exc:
        stopped, outcomes = str(exc), exc.outcomes
    written, unwritten = _reported(session_dir)
    failed = [o for o in outcomes if o.get("status") != "ok"]
    left = len(the_plan.cells) - len(outcomes)
    if stopped is not None:
        raise RunFailed(
            f"stopped at {stopped}; {len(failed) + left} of {len(the_plan.cells)} cells did not complete. "
            f"Make room (or give write access) there, then finish the session with: {command()} resume {session_dir}"
        )
    if unwritten is not None:
        # Measured and kept in the run directories, but no table or report: the session did not do
        # what it was for, and a script that reads its exit code must know.
        incomplete = f"; {len(failed)} of {len(outcomes)} cells did not complete" if failed else ""
        raise RunFailed(
            f"results not written: {unwritten}{incomplete}; what was measured is kept in "
            f"{session_dir / sessions.RUNS}: make room (or give write access) there, then: "
            f"{command()} report {session_dir}"
        )
    if failed:
        where = written.markdown if written is not None else session_dir
        raise RunFailed(
            f"{len(failed)} of {len(outcomes)} cells did not complete (see {where}); "
            f"rerun them with: {command()} resume {session_dir}"
        )
    return session_dir


def _timeout_set_by(request: Request) -> str | None:
    """What set the limit a cell may run (for a timeout's error): --timeout, or the `timeout` setting."""
    if request.timeout is None:
        return None
    limit = rundirs.seconds_text(request.timeout)
    setting = ((request.settings or {}).get("values") or {}).get("timeout")
    try:
        from_setting = setting is not None and float(setting) == request.timeout
    except (TypeError, ValueError):
        from_setting = False
    return f"the `timeout` setting, {limit}" if from_setting else f"--timeout {limit}"


def _reported(session_dir: Path) -> tuple[report.Written | None, str | None]:
    """results.csv, the report and the terminal table of the session; when the storage refused them,
    why (said here, and returned for the session's last line)."""
    written = _results(session_dir, report.write)
    if isinstance(written, str):
        console.print(f"[red]results not written[/red]: {escape(written)}")
        return None, written
    for said in [*(s.skipped() for s in written.skipped), *collect.kept_lines(written.table)]:
        console.print(said, markup=False, highlight=False)
    terminal.print_table(written.table)
    console.print(
        f"Report: {written.html} ({written.markdown.name})\n"
        f"TensorBoard: tensorboard --logdir {session_dir / 'tensorboard'}"
    )
    return written, None


def _results(session_dir: Path, write: Callable[[Path], Any]) -> Any:
    """results.csv (and the report) from what the run directories hold; when the storage refuses, why
    (the path and errno), for the session's last line."""
    try:
        return write(session_dir)
    except OSError as exc:
        if not files.is_storage_failure(exc):
            raise
        return files.describe(exc)
