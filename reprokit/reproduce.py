"""One `inv reproduce`: plan (or resume) a session, run its cells, collect and report.

tasks.py only turns flags into a `session.Request`; what happens to it lives here.
"""

from __future__ import annotations

from pathlib import Path

from . import accelerators, render, report, session
from .errors import ReprokitError, RunFailed
from .session import Plan, Request


def _check_runtime_options(the_plan: Plan, request: Request) -> None:
    # --image is the docker runtime's option too (its tag); the others are Slurm's alone.
    slurm_only = [key for key in request.runtime_options if key != "image" or the_plan.runtime != "docker"]
    if slurm_only and the_plan.runtime != "slurm":
        flags = ", ".join(f"--{key.replace('_', '-')}" for key in slurm_only)
        raise ReprokitError(
            f"{flags}: Slurm options, for --runtime slurm (this session runs {the_plan.runtime})"
        )


def dry_run_text(the_plan: Plan, request: Request, out: str | None) -> str:
    """What would run: each cell's run.sh, and the docker or sbatch wrapping around it."""
    profile = accelerators.get(the_plan.accelerator)
    parts: list[str] = []
    for cell in the_plan.cells:
        parts.append(f"# {cell.cell_id} ({the_plan.runtime}, {cell.scale}, {cell.accelerator})")
        parts.append(render.run_script(cell, profile))
        run_dir = Path(out or session.RESULTS_DIR) / "SESSION" / "runs" / cell.cell_id
        if the_plan.runtime == "docker":
            from .runtimes import docker as docker_runtime

            parts.append("# in the image, with the session's runs/ mounted:")
            parts.append(docker_runtime.dry_run_command(cell, run_dir, profile) + "\n")
        if the_plan.runtime == "slurm":
            from .runtimes import slurm

            parts.append(
                "# sbatch.sh, submitted with `sbatch --parsable` (`inv render --runtime slurm` writes it):"
            )
            parts.append(
                slurm.job_script(cell, profile, run_dir, slurm.SlurmOptions(**request.runtime_options))
            )
    return "\n".join(parts)


def reproduce(request: Request, out: str | None, resume: str | None, dry_run: bool) -> Path | None:
    """Run a new session (or finish `resume`); returns its folder, None for a dry run.

    Raises RunFailed at the end when any cell did not complete: the others ran and were reported.
    """
    if resume:
        # The session's own plan (session.json), so the same cells are rerun without repeating flags.
        session_dir = session.resume_dir(out, resume)
        the_plan, request = session.resume_plan(session_dir, request)
    else:
        the_plan = session.plan_request(request)
    _check_runtime_options(the_plan, request)
    for message in the_plan.messages:
        session.console.print(message)
    if dry_run:
        print(dry_run_text(the_plan, request, out))
        return None
    if resume:
        session.mark_resumed(session_dir)
    else:
        session_dir = session.new_session_dir(out, None)
        session.save_session(session_dir, the_plan, request)
    session.console.print(f"Session: {session_dir}")
    try:
        outcomes = session.run_cells(
            the_plan,
            session_dir,
            resume=bool(resume),
            timeout=request.timeout,
            runtime_options=request.runtime_options or None,
        )
    except KeyboardInterrupt:
        # results.csv still says what the run directories say, interrupted cell included.
        report.collect.collect(session_dir)
        session.console.print(f"Interrupted. Finish the session with: inv reproduce --resume {session_dir}")
        raise
    written = report.write(session_dir)
    report.print_table(written.table)
    session.console.print(
        f"Report: {written.html} ({written.markdown.name})\n"
        f"TensorBoard: tensorboard --logdir {session_dir / 'tensorboard'}"
    )
    failed = [o for o in outcomes if o.get("status") != "ok"]
    if failed:
        raise RunFailed(
            f"{len(failed)} of {len(outcomes)} cells did not complete (see {written.markdown}); "
            f"rerun them with: inv reproduce --resume {session_dir}"
        )
    return session_dir
