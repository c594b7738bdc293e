"""The Slurm runtime: one sbatch job per cell, one task per node, torchrun rendezvous across nodes.

The run directory lives in the session folder, on storage the compute nodes share with the
submitting machine: the kit writes cell.json, run.sh, bind-rank.sh and sbatch.sh there, submits
with `sbatch --parsable`, follows the job (squeue, then scontrol/sacct for its end), and settles
the run directory as the local runtime does. Containers: pyxis/enroot (`srun --container-image`),
Apptainer (`apptainer exec`), or none (this interpreter and the kit's trainers, on shared storage).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .. import rundirs
from ..accelerators import Profile
from ..cells import ROOT, Cell
from ..errors import ReprokitError
from ..render import SCRIPTS_DIR, sbatch_script, write_run_dir_inputs

CONTAINERS = ("auto", "pyxis", "apptainer", "none")
EXPORT_FORMATS = {"enroot": ".sqsh", "apptainer": ".sif"}
EXPORTS_DIR = ROOT / "exports"
POLL_SECONDS = 3.0
# After the job ends, how long summary.json may take to show on shared storage (NFS caches).
SETTLE_SECONDS = 30.0
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


@dataclass(frozen=True)
class SlurmOptions:
    """What `inv run --runtime slurm` passes on: where the job goes and what it runs in."""

    partition: str | None = None
    account: str | None = None
    time_limit: str | None = None
    # Whole nodes by default: a benchmark shares no core, GPU or NIC with another job.
    exclusive: bool = True
    container: str = "auto"
    # A squashfs/.sif file, or an image reference pyxis/Apptainer can pull (nvcr.io#nvidia/pytorch:25.01-py3).
    image: str | None = None


def resolve_container(container: str, profile: Profile) -> str:
    """auto: pyxis for GPU profiles (DGX-style clusters run enroot + pyxis), none otherwise."""
    if container not in CONTAINERS:
        raise ReprokitError(f"unknown container {container!r}; known: {', '.join(CONTAINERS)}")
    if container != "auto":
        return container
    return "pyxis" if profile.slurm.gres else "none"


def gpus_per_node(profile: Profile, devices: int) -> str | None:
    """--gpus-per-node from the profile's gres: `gpu` -> 8, `gpu:a100` -> a100:8 (a GPU type)."""
    gres = profile.slurm.gres
    if not gres:
        return None
    kind = gres.split(":", 1)[1] if ":" in gres else None
    return f"{kind}:{devices}" if kind else str(devices)


def image_tag(profile: Profile) -> str:
    from .. import images

    return images.image_tag(profile)


def export_path(profile: Profile, fmt: str, tag: str | None = None) -> Path:
    """Where `inv export` puts the image: exports/reprokit+cpu+0.1.0-<hash>.sqsh (enroot's own naming)."""
    if fmt not in EXPORT_FORMATS:
        raise ReprokitError(f"unknown export format {fmt!r}; known: {', '.join(EXPORT_FORMATS)}")
    name = (tag or image_tag(profile)).replace("/", "+").replace(":", "+")
    return EXPORTS_DIR / f"{name}{EXPORT_FORMATS[fmt]}"


def default_image(profile: Profile, container: str) -> str | None:
    if container == "pyxis":
        return str(export_path(profile, "enroot"))
    if container == "apptainer":
        return str(export_path(profile, "apptainer"))
    return None


def export_command(tag: str, fmt: str, dest: Path) -> list[str]:
    """The command that turns the built Docker image into a file every node can read."""
    if fmt == "enroot":
        return ["enroot", "import", "--output", str(dest), f"dockerd://{tag}"]
    if fmt == "apptainer":
        return ["apptainer", "build", str(dest), f"docker-daemon://{tag}"]
    raise ReprokitError(f"unknown export format {fmt!r}; known: {', '.join(EXPORT_FORMATS)}")


def export(
    profile: Profile, fmt: str, dest: Path | None = None, dry_run: bool = False
) -> tuple[list[str], Path]:
    """Run (or, dry, only make) the export command; returns it and the file it writes."""
    tag = image_tag(profile)
    target = dest or export_path(profile, fmt, tag)
    command = export_command(tag, fmt, target)
    if dry_run:
        return command, target
    if shutil.which(command[0]) is None:
        raise ReprokitError(
            f"`{command[0]}` is not installed here; run this where it is: {shlex.join(command)}"
        )
    if target.exists():
        # Both tools refuse to overwrite; the tag names the content, so the file is this image.
        return command, target
    target.parent.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        last = (result.stderr or result.stdout).strip().splitlines()
        raise ReprokitError(
            f"{shlex.join(command)} failed (exit {result.returncode}): {last[-1] if last else 'no output'}"
        )
    return command, target


def job_script(
    cell: Cell,
    profile: Profile,
    run_dir: Path,
    options: SlurmOptions,
    mount: Path | None = None,
) -> str:
    """The sbatch script of one cell, its run directory at run_dir (absolute in the script)."""
    if profile.launcher == "mpirun" and cell.nodes > 1:
        # run.sh's mpirun would start every rank on each node: one task per node is torchrun's layout.
        raise ReprokitError(
            f"{profile.name} launches with mpirun: the slurm runtime runs it on one node per job (--nodes 1)"
        )
    run_dir = run_dir.resolve()
    container = resolve_container(options.container, profile)
    return sbatch_script(
        "sbatch.j2",
        cell=cell,
        profile=profile,
        options=options,
        run_dir=str(run_dir),
        # The session folder (runs/<cell>/..): a cell reads its producers' checkpoints beside it.
        mount=str((mount or run_dir.parent.parent).resolve()),
        script=str(run_dir / "sbatch.sh"),
        container=container,
        image=options.image or default_image(profile, container) or "",
        image_tag=image_tag(profile) if container != "none" else "",
        python=sys.executable,
        scripts=os.environ.get("REPROKIT_SCRIPTS") or str(SCRIPTS_DIR),
        gpus_per_node=gpus_per_node(profile, cell.devices),
        bind=profile.launcher == "torchrun",
        published_command=_published_command(cell),
    )


def write_job_inputs(
    cell: Cell,
    profile: Profile,
    run_dir: Path,
    options: SlurmOptions,
    mount: Path | None = None,
) -> Path:
    """cell.json, run.sh, bind-rank.sh and sbatch.sh in the run directory; returns sbatch.sh."""
    run_dir = run_dir.resolve()
    write_run_dir_inputs(cell, profile, run_dir)
    if profile.launcher == "torchrun":
        wrapper = run_dir / "bind-rank.sh"
        wrapper.write_text(sbatch_script("bind-rank.sh.j2", cell=cell, profile=profile))
        wrapper.chmod(0o755)
    script = run_dir / "sbatch.sh"
    script.write_text(job_script(cell, profile, run_dir, options, mount))
    script.chmod(0o755)
    return script


def _published_command(cell: Cell) -> str | None:
    from .. import recipes

    try:
        commands = recipes.load(cell.recipe_file or cell.recipe).published_commands
    except ReprokitError:
        return None
    return commands.get(cell.variant) or commands.get(cell.accelerator)


def _slurm(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
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
    ping = _slurm("scontrol", "ping", timeout=20)
    if ping.returncode != 0 or "UP" not in ping.stdout:
        text = (ping.stderr or ping.stdout).strip().splitlines()
        return f"no Slurm controller answers: {text[-1] if text else 'scontrol ping failed'}"
    return None


def submit(script: Path) -> str:
    result = _slurm("sbatch", "--parsable", str(script))
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
    shown = _slurm("scontrol", "show", "job", "-o", job_id, timeout=30)
    if shown.returncode == 0 and shown.stdout.strip():
        fields = dict(item.split("=", 1) for item in shown.stdout.split() if "=" in item)
        return JobState(
            state=fields.get("JobState", "UNKNOWN").split("+")[0],
            reason=fields.get("Reason", ""),
            nodes=fields.get("NodeList", ""),
            exit_code=_exit_code(fields.get("ExitCode", "")),
            time_limit=fields.get("TimeLimit", ""),
        )
    acct = _slurm(
        "sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State,ExitCode,NodeList,Timelimit", timeout=30
    )
    lines = [line for line in acct.stdout.splitlines() if line.strip()] if acct.returncode == 0 else []
    if not lines:
        return None
    state, code, nodes, limit = (lines[0].split("|") + ["", "", "", ""])[:4]
    # sacct says "CANCELLED by 1000".
    return JobState(state=state.split()[0], nodes=nodes, exit_code=_exit_code(code), time_limit=limit)


def cancel(job_id: str) -> JobState | None:
    _slurm("scancel", job_id)
    deadline = time.monotonic() + CANCEL_WAIT_SECONDS
    state = job_state(job_id)
    while state is not None and not state.finished and time.monotonic() < deadline:
        time.sleep(1)
        state = job_state(job_id)
    return state


class SlurmRuntime:
    name = "slurm"

    def __init__(
        self,
        partition: str | None = None,
        account: str | None = None,
        time_limit: str | None = None,
        exclusive: bool = True,
        container: str = "auto",
        image: str | None = None,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self.options = SlurmOptions(partition, account, time_limit, exclusive, container, image)
        self.poll_seconds = poll_seconds

    def run(
        self,
        cell: Cell,
        run_dir: Path,
        profile: Profile,
        timeout: float | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> dict:
        reason = cluster_status()
        if reason is not None:
            raise ReprokitError(f"the slurm runtime needs a Slurm cluster: {reason}")
        container = resolve_container(self.options.container, profile)
        image = self.options.image or default_image(profile, container)
        if image and _looks_like_file(image) and not Path(image).exists():
            fmt = "enroot" if container == "pyxis" else "apptainer"
            raise ReprokitError(
                f"no {container} image at {image}; make it with "
                f"`inv export --accelerator {profile.name} --format {fmt}` or pass --image"
            )
        run_dir = run_dir.resolve()
        script = write_job_inputs(cell, profile, run_dir, self.options)
        job_id = submit(script)
        record: dict[str, Any] = {
            "job_id": job_id,
            "script": str(script),
            "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "options": asdict(self.options),
            "container": container,
            "image": image,
        }
        rundirs.write_json_atomic(run_dir / "slurm.json", record)
        try:
            state, why = self._follow(job_id, run_dir, timeout, progress)
        except KeyboardInterrupt:
            state = cancel(job_id)
            self._record(run_dir, record, state)
            rundirs.finish(run_dir, state.exit_code if state else None, "interrupted")
            raise
        self._record(run_dir, record, state)
        if why == "timeout":
            return rundirs.finish(run_dir, state.exit_code if state else None, "timeout")
        if state is None:
            return rundirs.finish(
                run_dir, None, f"Slurm job {job_id} vanished: neither squeue nor sacct knows it"
            )
        if state.state == "COMPLETED" and state.exit_code == 0:
            _wait_for_summary(run_dir)
            return rundirs.finish(run_dir, 0)
        if state.state == "TIMEOUT":
            return rundirs.finish(run_dir, state.exit_code, "timeout")
        if state.state == "FAILED":
            # The first rank's exception says what went wrong; the log's last lines are srun's
            # and torchrun's reports of it ("task 1: Exited with exit code 1").
            return rundirs.finish(run_dir, state.exit_code, root_cause(run_dir / "stdout.log"))
        detail = f" ({state.reason})" if state.reason and state.reason != "None" else ""
        return rundirs.finish(run_dir, state.exit_code, f"Slurm job {job_id} {state.state}{detail}")

    def _follow(
        self,
        job_id: str,
        run_dir: Path,
        timeout: float | None,
        progress: Callable[[str], None] | None,
    ) -> tuple[JobState | None, str | None]:
        """Poll until the job ends; (its last state, 'timeout' when the kit's own limit stopped it)."""
        started = time.monotonic()
        running_since: float | None = None
        while True:
            state = job_state(job_id)
            if state is None or state.finished:
                return state, None
            now = time.monotonic()
            if timeout is not None and now - started > timeout:
                return cancel(job_id), "timeout"
            if progress is not None:
                if state.state == "RUNNING":
                    running_since = running_since or now
                    progress(
                        rundirs.last_throughput(run_dir)
                        or f"Slurm job {job_id} running on {state.nodes} for {now - running_since:.0f}s"
                    )
                else:
                    why = f" ({state.reason})" if state.reason and state.reason != "None" else ""
                    progress(f"Slurm job {job_id} {state.state.lower()}{why}")
            time.sleep(self.poll_seconds)

    @staticmethod
    def _record(run_dir: Path, record: dict[str, Any], state: JobState | None) -> None:
        record.update(
            finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            state=state.state if state else None,
            exit_code=state.exit_code if state else None,
            nodes=state.nodes if state else None,
        )
        rundirs.write_json_atomic(run_dir / "slurm.json", record)


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


def _looks_like_file(image: str) -> bool:
    return image.endswith((".sqsh", ".sif", ".squashfs")) or image.startswith(("/", "./", "../"))


def _wait_for_summary(run_dir: Path) -> None:
    deadline = time.monotonic() + SETTLE_SECONDS
    while rundirs.summary(run_dir) is None and time.monotonic() < deadline:
        time.sleep(1)
