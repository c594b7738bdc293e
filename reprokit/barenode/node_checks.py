"""A bare node's checks before its first cell: the devices the driver lists (and how the recipes name
them, with `nvidia-smi -q` kept for the archive), and the trainers imported in this Python with the
bundle first, the software they will run read back (with `matmul`/`energy`, the device's peak and NVML).
What they find goes into OUT/checks.json (runner.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from reprokit.barenode import slices
from reprokit.contract import files, rundirs, trainers
from reprokit.contract.errors import ReprokitError
from reprokit.plan import listing
from reprokit.plan.accelerators import Profile

CHECK_TIMEOUT_S = 180


def devices(accelerator: str, profile: Profile, scratch: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """The devices here as checks.json's `devices` (or the one line that says why none are listed)."""
    try:
        here = listing.devices_here(accelerator)
        key = profile.device_key(here.model)
        named = f"{key}, as the recipes name it" if key else "a device no recipe names"
        found: dict[str, Any] = {"devices": list(here.models), "mig": here.partitions, "recipes_key": key}
        log(f"device: {here.describe()} ({named})")
    except ReprokitError as error:
        found = {"error": str(error)}
        log(f"device: {error}")
    if shutil.which("nvidia-smi") is None:
        log("nvidia-smi -q: needs the NVIDIA driver's tools (nvidia-smi is not on PATH)")
        return found
    try:
        done = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, timeout=30)
        files.write_text(scratch / "nvidia-smi-q.txt", done.stdout + done.stderr)
    except (OSError, subprocess.TimeoutExpired) as error:
        log(f"nvidia-smi -q: {error}")
    return found


def kit_trainers_of(planned: Iterable[slices.Planned]) -> list[str]:
    """The kit's trainers the cells run, as the trainers package has them (never a list kept here): a
    user's trainer, named by its module path, is imported by its cell."""
    known = set(trainers.kit_trainers())
    return sorted({p.cell.trainer for p in planned if p.cell.trainer in known})


def trainers_here(
    planned: Iterable[slices.Planned], checks: Iterable[str], scratch: Path, log: Callable[[str], None]
) -> tuple[dict[str, Any], bool]:
    """(what the trainers' device check found, whether the trainers import): they import in this Python
    with the bundle first (seconds, before any cell), and the software they will run is read back."""
    names = kit_trainers_of(planned)
    out = scratch / "devicecheck.json"
    command = [
        sys.executable,
        "-m",
        "reprokit_trainers.devicecheck",
        "--out",
        str(out),
        "--trainers",
        ",".join(names),
    ]
    command += [f"--{c}" for c in ("matmul", "energy") if c in checks]
    search = os.pathsep.join(filter(None, [trainers.search_path(), os.environ.get("PYTHONPATH")]))
    # The scratch outlives a command (several slices share one): an earlier check's answer read back
    # would say the trainers import where this check never started.
    out.unlink(missing_ok=True)
    try:
        done = subprocess.run(
            command,
            env={**os.environ, "PYTHONPATH": search},
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        log(f"checks: the device check gave no answer in {CHECK_TIMEOUT_S} s")
        return {}, True
    for line in done.stdout.splitlines():
        log(line)
    found = rundirs.read_json(out) if out.exists() else None
    if found is None:
        said = (done.stderr.strip().splitlines() or ["no output"])[-1]
        log(f"checks: the trainers' side does not start in this Python: {said}")
        return {"software": {"error": said}}, False
    return found, not found["software"]["trainers_failed"]
