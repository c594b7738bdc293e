"""`inv preflight`: before a long run, on the target machine, in minutes, per cell of the session a
`reproduce` would run: would it be judged, or would it not, and why.

The session is planned as `reproduce` plans it (same flags, same runtime and container platform);
then each check (checks/: devices, image, storage, data, a few real steps of each trainer and loader
variant, the collective across nodes) adds its findings, one line each, and a finding that `blocks`
makes its cells "would not". The table says it all; the task exits non-zero on any "would not".
"""

from __future__ import annotations

from pathlib import Path

from reprokit.contract import sessions
from reprokit.plan.planner import Plan, trainers_found
from reprokit.plan.request import Request
from reprokit.preflight.checks import CHECKS
from reprokit.preflight.context import Context
from reprokit.preflight.findings import Report
from reprokit.run.placement import plan
from reprokit.run.plugin_options import runtime_for

# Seconds one stepped cell may take (a published model loads and compiles before its first step).
STEP_TIMEOUT_S = 900.0


def run(
    request: Request, out: str | Path | None = None, steps: bool = True, planned: Plan | None = None
) -> Report:
    """The preflight of the session `request` describes; `steps`: run a few real steps of each
    trainer and loader variant (the rest takes seconds). `planned`: the plan itself, already made
    and said (a dry run's, a resumed session's cells that would run again)."""
    if planned is None:
        # Not fitted to this machine here: the devices check says what fits, per cell, instead of stopping.
        the_plan = plan(request, fit_devices=False)
        the_plan.messages += trainers_found(the_plan.cells, the_plan.container)
    else:
        the_plan = planned
    context = Context(
        plan=the_plan,
        request=request,
        runtime=runtime_for(the_plan, request.runtime_options),
        out=Path(out) if out else sessions.RESULTS_DIR,
        steps=steps,
        step_timeout=request.timeout or STEP_TIMEOUT_S,
    )
    for check in CHECKS:
        made = check()
        if made.applies(context):
            context.findings += made.run(context)
    return Report(
        list(the_plan.cells),
        context.findings,
        list(the_plan.messages),
        device=context.device_key,
        device_name=context.device_name,
    )


def describe(request: Request, report: Report) -> str:
    """The header of the table: what was checked."""
    cells = report.cells
    first = cells[0] if cells else None
    where = "" if not first else f"{first.accelerator}, {first.scale} scale, "
    return f"Preflight of {len(cells)} cell(s): {where}{', '.join(request.recipes) or 'every recipe'}"
