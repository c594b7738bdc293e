"""What an acceptance run measures one at a time: the nodes of a Slurm partition (or a node list), or
the devices of this machine, each with what identifies it (a node's name, a device's index and UUID).

A node list comes from Slurm itself (`scontrol show hostnames`, `sinfo -N`), a device list from the
listing command the accelerator's profile already names (`nvidia-smi -L`, `hl-smi`): the same lines
the planner counts, read here for each device's index and identity.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field

from reprokit.contract.errors import ReprokitError
from reprokit.plan import accelerators, listing

NODE, DEVICE = "node", "device"
# How a process is given one device alone, by the collective library the profile's devices speak
# (NVIDIA's driver reads the first, Habana's the second): the variable a Slurm gres or a container
# runtime sets for the same purpose.
# A device's UUID on a listing line (`GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)`).
UUID = re.compile(r"UUID:\s*([^)\s]+)")
# Slurm node names: what a cell id and a shell word can hold as they are.
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SLURM_TIMEOUT_S = 30


@dataclass(frozen=True)
class Target:
    """One node or one device: what its cell runs on, and how the run is pinned to it."""

    kind: str
    name: str
    # What identifies it beyond its name (a device's index, model and UUID; a node's Slurm name).
    identity: dict[str, str] = field(default_factory=dict)
    # The environment its run gets (the device alone, the machine's name for history).
    env: dict[str, str] = field(default_factory=dict)

    @property
    def suffix(self) -> str:
        """What its cell id carries after the cell's own: `--on-n1`, `--gpu3`."""
        return f"--on-{self.name}" if self.kind == NODE else f"--{self.name}"


def _slurm(*args: str) -> str:
    try:
        done = subprocess.run(list(args), capture_output=True, text=True, timeout=SLURM_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ReprokitError(f"`{' '.join(args)}` could not run: {exc}") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise ReprokitError(f"`{' '.join(args)}` exited {done.returncode}{': ' + said[-1] if said else ''}")
    return done.stdout


def slurm_nodes(partition: str | None, nodelist: str | None) -> list[Target]:
    """The nodes to accept: `nodelist` (Slurm's syntax, `n[1-4],gpu7`) expanded by Slurm, else every
    node of `partition` (else of the default partition) as sinfo lists it, drained ones included: a
    drained node is named as failed, never left out."""
    if nodelist:
        names = _slurm("scontrol", "show", "hostnames", nodelist).split()
        given = f"--nodelist {nodelist}"
    else:
        args = ["sinfo", "-h", "-N", "-o", "%N"] + (["-p", partition] if partition else [])
        names = list(dict.fromkeys(_slurm(*args).split()))
        given = f"--partition {partition}" if partition else "the default partition"
    if not names:
        raise ReprokitError(f"{given}: Slurm lists no node")
    bad = [n for n in names if not NODE_NAME.match(n)]
    if bad:
        raise ReprokitError(f"{given}: node name {bad[0]!r} is not a plain name (letters, digits, . _ -)")
    return [Target(NODE, n, {"slurm_node": n}, {"REPROKIT_MACHINE": n}) for n in names]


def devices(accelerator: str) -> list[Target]:
    """This machine's devices of `accelerator`, each alone, in the order its listing command prints
    them (the index the driver's visibility variable takes). A listing that cannot be made is the
    planner's one-line error (listing.devices_here)."""
    profile = accelerators.get(accelerator)
    variable = profile.devices.visible_env if profile.devices else None
    if profile.devices is None or variable is None:
        raise ReprokitError(
            f"--per-device: {accelerator} has no devices to run one at a time; give --accelerator with devices "
            f"({', '.join(n for n, p in accelerators.profiles().items() if p.devices and p.devices.visible_env)})"
        )
    listed = listing.devices_here(accelerator)  # raises, in one line, where it cannot list
    targets = []
    for index, (line, model) in enumerate(zip(listed.lines, listed.models, strict=True)):
        identity = {"index": str(index), "model": model}
        uuid = UUID.search(line)
        if uuid:
            identity["uuid"] = uuid.group(1)
        targets.append(Target(DEVICE, f"{'hpu' if profile.torch_device == 'hpu' else 'gpu'}{index}", identity,
                              {variable: str(index)}))  # fmt: skip
    return targets
