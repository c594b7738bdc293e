"""A Slurm job seen from the submitting machine, through Slurm's own commands: whether a controller
answers, a job script submitted, a job's state (scontrol, then accounting once it is gone), a job
cancelled and waited for, and the first exception a rank raised as its log shows it. The runtime
(slurm.py) follows its jobs through these."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from reprokit.contract.errors import ReprokitError

CANCEL_WAIT_SECONDS = 60.0
# Job states after which nothing more happens (squeue/scontrol/sacct spell them alike).
FINISHED = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
}


def slurm_command(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """A Slurm command's answer; one that hangs (a controller gone) is exit 124, said in its stderr."""
    try:
        return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(args), 124, "", f"{args[0]} timed out after {timeout:.0f}s")


def cluster_status() -> str | None:
    """None when a Slurm controller answers here; else why not, in a few words."""
    if shutil.which("sbatch") is None:
        return "sbatch is not installed here (not a Slurm login node)"
    conf = os.environ.get("SLURM_CONF")
    if conf and not Path(conf).is_file():
        # The clients would retry reading it for a minute before saying so.
        return f"SLURM_CONF names {conf}, which does not exist"
    ping = slurm_command("scontrol", "ping", timeout=20)
    if ping.returncode != 0 or "UP" not in ping.stdout:
        text = (ping.stderr or ping.stdout).strip().splitlines()
        return f"no Slurm controller answers: {text[-1] if text else 'scontrol ping failed'}"
    return None


def submit(script: Path) -> str:
    result = slurm_command("sbatch", "--parsable", str(script))
    if result.returncode != 0:
        text = (result.stderr or result.stdout).strip().splitlines()
        raise ReprokitError(f"sbatch {script} failed: {text[-1] if text else f'exit {result.returncode}'}")
    # --parsable prints "id" or "id;cluster".
    return result.stdout.strip().split(";")[0]


@dataclass
class JobState:
    state: str
    reason: str = ""
    nodes: str = ""
    exit_code: int | None = None
    time_limit: str = ""

    @property
    def finished(self) -> bool:
        return self.state in FINISHED


def _exit_code(text: str) -> int | None:
    """Slurm's ExitCode 'code:signal' as a shell would report it."""
    try:
        code, signal = (int(x) for x in text.split(":"))
    except ValueError:
        return None
    return 128 + signal if signal else code


def job_state(job_id: str) -> JobState | None:
    """The job as slurmctld knows it (scontrol: finished jobs too, for MinJobAge), else accounting."""
    shown = slurm_command("scontrol", "show", "job", "-o", job_id, timeout=30)
    if shown.returncode == 0 and shown.stdout.strip():
        fields = dict(item.split("=", 1) for item in shown.stdout.split() if "=" in item)
        return JobState(
            state=fields.get("JobState", "UNKNOWN").split("+")[0],
            reason=fields.get("Reason", ""),
            nodes=fields.get("NodeList", ""),
            exit_code=_exit_code(fields.get("ExitCode", "")),
            time_limit=fields.get("TimeLimit", ""),
        )
    acct = slurm_command(
        "sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State,ExitCode,NodeList,Timelimit", timeout=30
    )
    lines = [line for line in acct.stdout.splitlines() if line.strip()] if acct.returncode == 0 else []
    if not lines:
        return None
    state, code, nodes, limit = (lines[0].split("|") + ["", "", "", ""])[:4]
    # sacct says "CANCELLED by 1000".
    return JobState(state=state.split()[0], nodes=nodes, exit_code=_exit_code(code), time_limit=limit)


def cancel(job_id: str) -> JobState | None:
    slurm_command("scancel", job_id)
    deadline = time.monotonic() + CANCEL_WAIT_SECONDS
    state = job_state(job_id)
    while state is not None and not state.finished and time.monotonic() < deadline:
        time.sleep(1)
        state = job_state(job_id)
    return state


# After srun's "<task>: " label (and torchrun's "[rank<n>]: "), a Python exception ("RuntimeError: ...", "torch.OutOfMemoryError: ...")
# or an argument parser's refusal ("run_volo.py: error: ...").
EXCEPTION_LINE = re.compile(
    r"^(?:(\d+): )?(?:\[rank\d+\]: )?((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)\b:?.*|[\w.-]+\.py: error: .*)$"
)
# What torchrun and srun say about a rank that already failed: never the cause.
NOT_CAUSES = ("ChildFailedError", "SignalException")


def root_cause(log: Path) -> str | None:
    """The first exception a rank raised, with the Slurm task (node) that raised it."""
    try:
        with open(log, "rb") as fh:
            text = fh.read(4 * 2**20).decode("utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        found = EXCEPTION_LINE.match(line.strip())
        if found and not any(name in found.group(2) for name in NOT_CAUSES):
            where = f" (Slurm task {found.group(1)})" if found.group(1) else ""
            return f"{found.group(2).strip()[:300]}{where}"
    return None
