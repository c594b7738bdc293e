"""Pairs, for the network (`inv accept --pairs`): after the nodes' own runs, the collective between
neighbouring nodes (a ring: n1-n2, n2-n3, ..., the last with the first), one two-node Slurm job per pair
in turn, each an all-reduce of the recipe's backend on every device (NCCL on GPUs, gloo on CPUs:
reprokit_trainers.devicecheck.allreduce), its bus bandwidth held to the other pairs' by the nodes' rule.
A pair's job lives in the session's pairs/<a>-<b>/ (pair.sh, sbatch.sh, stdout.log, slurm.json,
allreduce.json: beside runs/, which holds the cells' run directories alone), in the session's container
platform.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprokit.contract import files, rundirs
from reprokit.contract.errors import ReprokitError
from reprokit.fleet.judging import FAILED, PASS, SLOW, UNJUDGED, Rule, against_others
from reprokit.fleet.targets import Target
from reprokit.plan.accelerators import Profile
from reprokit.plan.cells import Cell
from reprokit.render.shell_values import code, quote, sbatch, sbatch_path
from reprokit.run.containers.base import SRUN
from reprokit.run.runtimes import slurm

RESULT = "allreduce.json"
PROBE = "reprokit_trainers.devicecheck.allreduce"
UNIT = "GB/s"


@dataclass
class PairVerdict:
    pair: str
    nodes: list[str]
    status: str
    busbw: float | None = None
    unit: str = UNIT
    others_median: float | None = None
    gap: float | None = None
    threshold: float | None = None
    reasons: list[str] = field(default_factory=list)
    error: str | None = None
    job_id: str | None = None
    run_dir: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def ring(nodes: list[Target]) -> list[tuple[Target, Target]]:
    """Each node with the next, and the last with the first where that is another pair."""
    names = list(nodes)
    found = list(zip(names, names[1:], strict=False))
    if len(names) > 2:
        found.append((names[-1], names[0]))
    return found


def _pair_sh(profile: Profile, devices: int) -> str:
    env = "".join(f"export {key}={quote(value)}\n" for key, value in profile.env.items())
    return (
        "#!/usr/bin/env bash\n"
        "# An acceptance run's pair: all-reduce between the job's two nodes (reprokit/fleet/pairs.py).\n"
        "set -euo pipefail\n"
        'TRAINERS="${REPROKIT_TRAINERS_PATH:-$([ -d /opt/reprokit/reprokit_trainers ] && echo /opt/reprokit || true)}"\n'
        'if [ -n "$TRAINERS" ]; then export PYTHONPATH="$TRAINERS${PYTHONPATH:+:$PYTHONPATH}"; fi\n'
        f'PYTHON="${{PYTHON:-{quote(profile.python)}}}"\n'
        'export REPROKIT_MACHINE="${SLURMD_NODENAME:-$(hostname)}"\n'
        f"{env}"
        f'exec "$PYTHON" -m torch.distributed.run --nnodes 2 --nproc_per_node {int(devices)} \\\n'
        '  --rdzv_backend c10d --rdzv_endpoint "$MASTER_ADDR:$MASTER_PORT" --rdzv_id "$RDZV_ID" \\\n'
        f'  -m {PROBE} --out "$RUN_DIR/{RESULT}"\n'
    )


def job_script(
    runtime: slurm.SlurmRuntime, cell: Cell, profile: Profile, pair: tuple[str, str], run_dir: Path
) -> str:
    """The pair's sbatch script: two nodes, one task each, the rendezvous on the first, the session's
    container platform around pair.sh."""
    options = runtime.options
    launch = runtime.container.launch(cell, run_dir, profile, SRUN, run_dir.parent.parent)
    gpus = slurm.gpus_per_node(profile, cell.devices)
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name=reprokit-pair-{pair[0]}-{pair[1]}",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --nodelist={sbatch(','.join(pair), '--nodelist')}",
        *([f"#SBATCH --gpus-per-node={sbatch(gpus)}"] if gpus else []),
        *([f"#SBATCH --partition={sbatch(options.partition, '--partition')}"] if options.partition else []),
        *([f"#SBATCH --account={sbatch(options.account, '--account')}"] if options.account else []),
        *([f"#SBATCH --time={sbatch(options.time_limit, '--time-limit')}"] if options.time_limit else []),
        *(["#SBATCH --exclusive", "#SBATCH --mem=0"] if options.exclusive else []),
        f"#SBATCH --output={sbatch_path(str(run_dir / rundirs.FILES['stdout']), 'the run directory')}",
        "set -euo pipefail",
        f"export RUN_DIR={quote(run_dir)}",
        'first_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)',
        """node_addr=$(scontrol show node "$first_node" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')""",
        "export MASTER_ADDR=${node_addr:-$first_node}",
        "export MASTER_PORT=${MASTER_PORT:-$(( 20000 + SLURM_JOB_ID % 20000 ))}",
        "export RDZV_ID=$SLURM_JOB_ID",
        *(code(line) for line in launch.setup),
        'srun --ntasks-per-node=1 --cpus-per-task="$SLURM_CPUS_ON_NODE" --cpu-bind=none --kill-on-bad-exit=1 --label '
        + " ".join([*(quote(f) for f in launch.flags), *(quote(p) for p in launch.prefix), 'bash "$RUN_DIR/pair.sh"']),
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def _measure(runtime, cell, profile, pair, run_dir, timeout) -> PairVerdict:
    verdict = PairVerdict(f"{pair[0]}-{pair[1]}", list(pair), FAILED, run_dir=str(run_dir))
    files.make_dir(run_dir)
    files.write_text(run_dir / "pair.sh", _pair_sh(profile, cell.devices), files.SCRIPT_MODE)
    script = files.write_text(
        run_dir / rundirs.FILES["sbatch"],
        job_script(runtime, cell, profile, pair, run_dir),
        files.SCRIPT_MODE,
    )
    try:
        verdict.job_id = slurm.submit(script)
    except ReprokitError as exc:
        verdict.error = str(exc)
        return verdict
    started = time.monotonic()
    try:
        state = slurm.job_state(verdict.job_id)
        while state is not None and not state.finished:
            if timeout is not None and time.monotonic() - started > timeout:
                slurm.cancel(verdict.job_id)
                verdict.error = rundirs.timed_out(f"{rundirs.seconds_text(timeout)} s (--timeout)")
                return verdict
            time.sleep(runtime.poll_seconds)
            state = slurm.job_state(verdict.job_id)
    except KeyboardInterrupt:
        slurm.cancel(verdict.job_id)  # Ctrl-C stops the pair's job as it stops the nodes' ones
        raise
    files.write_json(run_dir / rundirs.FILES["slurm_job"], {"job_id": verdict.job_id, "state": state and state.state,
                                                            "exit_code": state and state.exit_code})  # fmt: skip
    try:
        measured = json.loads((run_dir / RESULT).read_text())
        verdict.busbw = float(measured["busbw_gb_s"])
        verdict.status = PASS
    except (OSError, ValueError, KeyError, TypeError):
        cause = slurm.root_cause(run_dir / rundirs.FILES["stdout"])
        said = f"Slurm job {verdict.job_id} {state.state if state else 'vanished'}"
        verdict.error = (
            f"{cause} ({said})" if cause else f"{said}: no {RESULT} (see {run_dir / rundirs.FILES['stdout']})"
        )
    return verdict


def run(
    runtime: slurm.SlurmRuntime,
    cell: Cell,
    profile: Profile,
    nodes: list[Target],
    folder: Path,
    rule: Rule,
    timeout: float | None,
    said: Callable[[PairVerdict], None],
) -> list[PairVerdict]:
    """Each pair of the ring in turn (one pair's traffic at a time: a pair is measured alone), then
    each judged against the other pairs; worst first."""
    if profile.launcher != "torchrun":
        raise ReprokitError(
            f"--pairs: {profile.name} launches with {profile.launcher}; the pairs' check runs torchrun"
        )
    found = []
    for pair in ring(nodes):
        names = (pair[0].name, pair[1].name)
        verdict = _measure(runtime, cell, profile, names, folder / f"{names[0]}-{names[1]}", timeout)
        said(verdict)
        found.append(verdict)
    return judge(found, rule)


def judge(found: list[PairVerdict], rule: Rule) -> list[PairVerdict]:
    """Each measured pair's bus bandwidth against the other pairs' by the nodes' rule; worst first."""
    rates = {v.pair: v.busbw for v in found if v.busbw is not None}
    for v in found:
        if v.busbw is None:
            continue
        compared = against_others(v.busbw, [r for p, r in rates.items() if p != v.pair], rule)
        if compared is None:
            v.status = UNJUDGED
            v.reasons.append("no other pair measured: nothing to hold it to")
            continue
        v.others_median, _, v.gap, v.threshold = compared
        if v.gap > v.threshold:
            v.status = SLOW
            v.reasons.append(
                f"{v.gap:.0%} below the median of the other {len(rates) - 1} pair(s), {v.others_median:.4g} {UNIT} "
                f"bus bandwidth (more than {v.threshold:.0%})"
            )
    order = {FAILED: 0, SLOW: 1, UNJUDGED: 2, PASS: 3}
    return sorted(found, key=lambda v: (order[v.status], v.busbw if v.busbw is not None else 0.0))
