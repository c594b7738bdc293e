"""The Slurm runtime: one sbatch job per cell, one task per node, torchrun rendezvous across nodes.

The run directory lives in the session folder, on storage the compute nodes share with the
submitting machine: the kit writes cell.json, run.sh, bind-rank.sh and sbatch.sh there, submits
with `sbatch --parsable`, follows the job (scontrol, then sacct for its end) and the session
settles the run directory as for any runtime. What the job runs in (pyxis/enroot, Apptainer, or
no container) is the container platform's part of the job script.

The cluster's commands (a controller answering, sbatch, a job's state, scancel, a log's first
exception): slurm_jobs.py, whose names stay importable from here.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from reprokit.contract import files, rundirs
from reprokit.contract.errors import ReprokitError
from reprokit.contract.layout import JOBS
from reprokit.plan.accelerators import Profile
from reprokit.plan.cells import Cell
from reprokit.plan.recipes import load as load_recipe
from reprokit.render.templates import render
from reprokit.run.containers.base import SRUN
from reprokit.run.handles import Ended, Handle, wait_for
from reprokit.run.runtimes.base import Runtime, write_run_dir_inputs
from reprokit.run.runtimes.slurm_jobs import (
    JobState,
    cancel,
    cluster_status,
    job_state,
    root_cause,
    slurm_command,
    submit,
)

POLL_SECONDS = 3.0
# After the job ends, how long summary.json may take to show on shared storage (NFS caches).
SETTLE_SECONDS = 30.0


@dataclass(frozen=True)
class SlurmOptions:
    """Where the job goes: what `--partition`, `--account`, `--time-limit` and `--no-exclusive` set."""

    partition: str | None = None
    account: str | None = None
    time_limit: str | None = None
    # Whole nodes by default: a benchmark shares no core, GPU or NIC with another job.
    exclusive: bool = True
    # The nodes the job must run on (sbatch --nodelist): an acceptance run's job per node.
    nodelist: str | None = None


def gpus_per_node(profile: Profile, devices: int) -> str | None:
    """--gpus-per-node from the profile's gres: `gpu` -> 8, `gpu:a100` -> a100:8 (a GPU type)."""
    gres = profile.slurm.gres
    if not gres:
        return None
    kind = gres.split(":", 1)[1] if ":" in gres else None
    return f"{kind}:{devices}" if kind else str(devices)


def _published_command(cell: Cell) -> str | None:
    """The command the cell's variant was published with, on one line for the job script's header."""
    try:
        found = load_recipe(cell.recipe_file or cell.recipe).published_command(cell.variant)
    except ReprokitError:
        return None
    return " ".join(found.command.replace("\\\n", " ").split()) if found else None


class JobHandle(Handle):
    """A submitted job, followed with scontrol/sacct; slurm.json records it as it goes."""

    def __init__(self, job_id: str, run_dir: Path, record: dict[str, Any], poll_seconds: float) -> None:
        self.job_id = job_id
        self.run_dir = run_dir
        self.record = record
        self.poll_seconds = poll_seconds
        self.state: JobState | None = None
        self._running_since: float | None = None
        files.write_json(run_dir / rundirs.FILES["slurm_job"], record)

    def _settled(self, state: JobState | None) -> Ended:
        self.record.update(
            finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            state=state.state if state else None,
            exit_code=state.exit_code if state else None,
            nodes=state.nodes if state else None,
        )
        files.write_json(self.run_dir / rundirs.FILES["slurm_job"], self.record)
        if state is None:
            return Ended(None, f"Slurm job {self.job_id} vanished: neither scontrol nor sacct knows it")
        if state.state == "COMPLETED" and state.exit_code == 0:
            # The job is over; its summary.json may take a moment to show on shared storage.
            wait_for(lambda: rundirs.summary(self.run_dir) is not None, SETTLE_SECONDS)
            return Ended(0)
        if state.state == "TIMEOUT":
            limit = f", {state.time_limit}" if state.time_limit else ""
            return Ended(
                state.exit_code,
                rundirs.timed_out(f"the Slurm job's time limit{limit} (--time-limit, else the partition's)"),
            )
        if state.state == "FAILED":
            # The first rank's exception says what went wrong; the log's last lines are srun's
            # and torchrun's reports of it ("task 1: Exited with exit code 1").
            return Ended(state.exit_code, root_cause(self.run_dir / rundirs.FILES["stdout"]))
        detail = f" ({state.reason})" if state.reason and state.reason != "None" else ""
        return Ended(state.exit_code, f"Slurm job {self.job_id} {state.state}{detail}")

    def poll(self) -> Ended | None:
        self.state = job_state(self.job_id)
        if self.state is None or self.state.finished:
            return self._settled(self.state)
        return None

    def stop(self) -> Ended:
        state = cancel(self.job_id)
        self._settled(state)
        return Ended(state.exit_code if state else None)

    def describe(self, elapsed: float) -> str:
        state = self.state
        if state is not None and state.state == "RUNNING":
            self._running_since = self._running_since or time.monotonic()
            return f"Slurm job {self.job_id} running on {state.nodes} for {time.monotonic() - self._running_since:.0f}s"
        why = f" ({state.reason})" if state and state.reason and state.reason != "None" else ""
        return f"Slurm job {self.job_id} {state.state.lower() if state else 'submitted'}{why}"


class SlurmRuntime(Runtime):
    name = "slurm"
    options_class = SlurmOptions
    launches = "srun"

    def __init__(self, options: SlurmOptions, container, poll_seconds: float = POLL_SECONDS) -> None:
        super().__init__(options, container)
        self.poll_seconds = poll_seconds

    def auto_container(self, profile: Profile) -> tuple[str, str | None]:
        """The profile's Slurm container (pyxis on GPUs, Apptainer on Gaudi: the image's stack), none on CPUs."""
        return profile.slurm.container, None

    def check(self, profile: Profile) -> None:
        reason = cluster_status()
        if reason is not None:
            raise ReprokitError(f"the slurm runtime needs a Slurm cluster: {reason}")
        self.container.check(profile, self.name)

    def where(self, cells: list[Cell]) -> str | None:
        """The partition the jobs would go to, as sinfo lists it: there, up, with as many nodes as the
        largest cell asks for. Nothing to say where no Slurm client is installed (a dry run rendering
        for a cluster elsewhere) or no controller answers: the session's check refuses that before the
        first cell, in its own words."""
        if shutil.which("sinfo") is None or cluster_status() is not None:
            return None
        listed = slurm_command("sinfo", "--noheader", "--format=%P|%a|%D", timeout=20)
        if listed.returncode != 0:
            text = (listed.stderr or listed.stdout).strip().splitlines()
            raise ReprokitError(
                f"sinfo gave no partitions: {text[-1] if text else f'exit {listed.returncode}'}"
            )
        partitions: dict[str, tuple[str, int]] = {}
        default = None
        for line in listed.stdout.splitlines():
            name, _, rest = line.strip().partition("|")
            available, _, nodes = rest.partition("|")
            if name.endswith("*"):
                name = default = name[:-1]
            state, count = partitions.get(name, (available, 0))
            partitions[name] = (state, count + int(nodes or 0))
        asked = self.options.partition
        name = asked or default
        if name is None:
            raise ReprokitError("the cluster has no default partition: give one with --partition")
        if name not in partitions:
            raise ReprokitError(
                f"--partition {asked}: the cluster has no such partition (sinfo lists: {', '.join(partitions) or 'none'})"
            )
        state, count = partitions[name]
        wanted = max((c.nodes for c in cells), default=1)
        said = f"partition {name}{'' if asked else ' (the default)'}"
        if state != "up":
            raise ReprokitError(f"{said} is {state}: no job of it would start (sinfo)")
        if count < wanted:
            raise ReprokitError(f"{said} has {count} node(s); the cells ask for {wanted}")
        return f"{said}: up, {count} node(s)"

    def job_script(self, cell: Cell, profile: Profile, run_dir: Path, mount: Path | None = None) -> str:
        """The sbatch script of one cell, its run directory at run_dir (absolute in the script)."""
        if profile.launcher == "mpirun" and cell.nodes > 1:
            # run.sh's mpirun would start every rank on each node: one task per node is torchrun's layout.
            raise ReprokitError(
                f"{profile.name} launches with mpirun: the slurm runtime runs it on one node per job (--nodes 1)"
            )
        run_dir = run_dir.resolve()
        # The session folder (runs/<cell>/..): a cell reads its producers' checkpoints beside it.
        mount = (mount or run_dir.parent.parent).resolve()
        return render(
            JOBS,
            "sbatch.j2",
            cell=cell,
            profile=profile,
            options=self.options,
            run_dir=str(run_dir),
            script=str(run_dir / rundirs.FILES["sbatch"]),
            part=self.container.launch(cell, run_dir, profile, SRUN, mount),
            gpus_per_node=gpus_per_node(profile, cell.devices),
            bind=profile.launcher == "torchrun",
            published_command=_published_command(cell),
        )

    def prepare(self, cell: Cell, run_dir: Path, profile: Profile) -> Path:
        """cell.json, run.sh, bind-rank.sh and sbatch.sh in the run directory; returns sbatch.sh."""
        run_dir = run_dir.resolve()
        write_run_dir_inputs(cell, profile, run_dir)
        if profile.launcher == "torchrun":
            wrapper = run_dir / rundirs.FILES["rank_binding"]
            files.write_text(
                wrapper, render(JOBS, "bind-rank.sh.j2", cell=cell, profile=profile), files.SCRIPT_MODE
            )
        return files.write_text(
            run_dir / rundirs.FILES["sbatch"], self.job_script(cell, profile, run_dir), files.SCRIPT_MODE
        )

    def start(self, cell: Cell, run_dir: Path, profile: Profile) -> Handle:
        script = self.prepare(cell, run_dir, profile)
        job_id = submit(script)
        record = {
            "job_id": job_id,
            "script": str(script),
            "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "options": asdict(self.options),
            "container": self.container.name,
            "image": self.container.launch(
                cell, run_dir.resolve(), profile, SRUN, run_dir.resolve().parent.parent
            ).image,
        }
        return JobHandle(job_id, run_dir.resolve(), record, self.poll_seconds)

    def dry_run(self, cell: Cell, run_dir: Path, profile: Profile) -> str:
        return (
            "# sbatch.sh, submitted with `sbatch --parsable` (`inv render --runtime slurm` writes it):\n"
            + self.job_script(cell, profile, run_dir)
        )
