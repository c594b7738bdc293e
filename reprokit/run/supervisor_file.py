"""Who runs a cell: supervisor.json in its run directory, written when the kit starts the cell's
process and removed when the kit has settled it. A kit killed with -9 (a login node's OOM killer, a
closed cloud shell) leaves the file behind; `--resume` reads it and refuses to start a second
trainer in a run directory where the first one still runs (it would clear its files from under it
and mix two runs' event files in one tensorboard/ folder).

A process is recognised by its pid and its start time (the kernel's, in /proc), so a pid reused by
another program since is not mistaken for the trainer.
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reprokit.contract import files, rundirs
from reprokit.contract.errors import ReprokitError

FILE = rundirs.FILES["supervisor"]


def _stat(pid: str) -> list[str] | None:
    """proc(5)'s stat fields after the command (state first), None for a process that is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (None when it is gone or a zombie)."""
    fields = _stat(str(pid))
    # proc(5): state is field 3, starttime field 22.
    return None if not fields or fields[0] == "Z" else int(fields[19])


def record(run_dir: Path, pid: int, pgid: int) -> None:
    """Say that the kit (this process) runs the cell as process `pid`, in process group `pgid`."""
    files.write_json(
        run_dir / FILE,
        {
            "host": socket.gethostname(),
            "kit_pid": os.getpid(),
            "kit_started": start_ticks(os.getpid()),
            "pid": pid,
            "pgid": pgid,
            "started": start_ticks(pid),
        },
    )


def clear(run_dir: Path) -> None:
    (run_dir / FILE).unlink(missing_ok=True)


def _group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs (a zombie no one reaped does not)."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat(entry.name)
            if fields and fields[2] == str(pgid) and fields[0] != "Z":
                return True
    return False


def _slurm_answers() -> bool:
    from reprokit.run.runtimes import slurm  # only where a cell went to Slurm

    return slurm.cluster_status() is None


def still_running(run_dir: Path, slurm_answers: Callable[[], bool] = _slurm_answers) -> str | None:
    """What still runs in `run_dir` from a kit that is gone, in a few words; None when nothing does."""
    job = _slurm_job_alive(run_dir, slurm_answers)
    if job is not None:
        return job
    found: dict[str, Any] | None = rundirs.read_json(run_dir / FILE)
    if not found or found.get("host") != socket.gethostname():
        return None
    kit, pid, pgid = found.get("kit_pid"), found.get("pid"), found.get("pgid")
    if isinstance(kit, int) and kit != os.getpid() and start_ticks(kit) == found.get("kit_started"):
        return f"the kit that started it is still running (pid {kit})"
    if isinstance(pid, int) and start_ticks(pid) is not None and start_ticks(pid) == found.get("started"):
        return f"its trainer is still running (pid {pid}; stop it with: kill -- -{pgid})"
    if isinstance(pgid, int) and pgid == pid and _group_alive(pgid):
        return f"processes of its trainer are still running (process group {pgid}; stop them with: kill -- -{pgid})"
    return None


def _slurm_job_alive(run_dir: Path, slurm_answers: Callable[[], bool]) -> str | None:
    """A Slurm job outlives the kit that submitted it (a closed login shell, kill -9): its slurm.json
    names it, and slurmctld says whether it is still queued or running, from any login node."""
    job = rundirs.read_json(run_dir / rundirs.FILES["slurm_job"])
    job_id = job.get("job_id") if job else None
    if not isinstance(job_id, str) or rundirs.is_complete(run_dir):
        return None
    if not slurm_answers():
        return None  # no controller answers here: the kit that would resubmit cannot either
    from reprokit.run.runtimes import slurm

    state = slurm.job_state(job_id)
    if state is None or state.finished:
        return None
    return f"its Slurm job {job_id} is {state.state} (cancel it with: scancel {job_id})"


def refuse_live(run_dirs: list[Path]) -> None:
    """Refuse, in one line, to rerun cells whose trainer from an earlier kit still runs."""
    answers = functools.cache(_slurm_answers)  # one ping of the controller for the session, not one a cell
    live = [(d, why) for d in run_dirs if (why := still_running(d, answers)) is not None]
    if live:
        what = "; ".join(f"{d.name}: {why}" for d, why in live)
        raise ReprokitError(
            f"cannot resume while a cell of the session still runs ({what}); wait for it to end"
        )
