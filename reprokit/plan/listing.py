"""What this machine has of an accelerator: which one it is (each profile's `detect`, in their
detection order) and its devices, listed by the profile's command and read by its patterns. The
driver's tools run in a process group of their own, within a limit: a wedged driver is a refusal
naming it, never a hang nor a guess."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
from dataclasses import dataclass

from reprokit.contract.errors import ReprokitError
from reprokit.plan import accelerators


@dataclass(frozen=True)
class Devices:
    """What this machine has of an accelerator: its devices' models and their partitions (MIG devices)."""

    accelerator: str
    models: tuple[str, ...]
    partitions: int = 0
    # Each device's line as the listing printed it, in its order (the index its visibility variable takes).
    lines: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        return len(self.models)

    @property
    def model(self) -> str | None:
        return self.models[0] if self.models else None

    def describe(self) -> str:
        mig = f", in MIG mode: {self.partitions} MIG device(s)" if self.partitions else ""
        return f"{self.count} x {self.model}{mig}"

    def refusal(self, wanted: int, asked: bool = True) -> str | None:
        """Why `wanted` ranks of one cell cannot run on these devices, in a line; None where they can.
        `asked`: the user gave the count (--devices); otherwise the published cells want whole devices."""
        if self.partitions and (wanted > 1 or not asked):
            return (
                f"this machine's {self.accelerator} GPUs are in MIG mode ({self.describe()}): a CUDA process sees "
                f"one MIG device, a slice of a GPU, and NCCL cannot join MIG devices, so {wanted} rank(s) on whole "
                "devices cannot run; turn MIG off (nvidia-smi -mig 0, as root), or run one rank on one MIG device "
                "with --devices 1"
            )
        if wanted > self.count:
            return f"--devices {wanted}: this machine has {self.describe()}"
        return None


# Seconds a driver's listing tool may take (a wedged driver hangs nvidia-smi for minutes).
TOOL_TIMEOUT_S = 30


def run_tool(command: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """A driver's tool, run as its command says (no shell), in a process group of its own: on a hang
    the whole group is killed, so nothing it started outlives the kit's limit. Raises
    subprocess.TimeoutExpired after killing it, FileNotFoundError where it is not installed."""
    argv = shlex.split(command)
    timeout = TOOL_TIMEOUT_S if timeout is None else timeout
    with subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # Before it is reaped: its pid, the group's id, cannot have been reused yet.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


def tool_failure(command: str) -> str | None:
    """Why `command` (a driver's listing tool) gave no listing, in a phrase; None when it exited 0."""
    try:
        done = run_tool(command)
    except subprocess.TimeoutExpired as timed_out:
        return f"`{command}` gave no answer in {timed_out.timeout:.0f} s (stopped)"
    except OSError as error:
        return f"`{command}` could not run: {error.strerror or error}"
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        return f"`{command}` exited {done.returncode}{': ' + said[-1].strip() if said else ''}"
    return None


def detect() -> str:
    """The accelerator of this machine, by each profile's detect command. A profile's tool that is
    not installed means not that accelerator; one that is installed but fails or hangs is a refusal
    naming it (a broken driver is not a CPU machine: its smoke cells would be no answer)."""
    for name, profile in accelerators.profiles().items():
        command = profile.detect
        if command == "true":
            return name
        if shutil.which(shlex.split(command)[0]) is None:
            continue
        failure = tool_failure(command)
        if failure is None:
            return name
        raise ReprokitError(
            f"--accelerator auto: the {name} driver's tool does not answer ({failure}); fix the driver, or "
            f"name the accelerator: --accelerator cpu, or --accelerator {name} --devices N"
        )
    return "cpu"


def resolve(name: str) -> accelerators.Profile:
    """The profile `--accelerator name` means: this machine's for auto."""
    return accelerators.get(detect() if name == "auto" else name)


class CannotCount(ReprokitError):
    """This machine's devices cannot be listed (the driver's tool is missing, fails or hangs): a count is
    never guessed, and one given with --devices is used as given (planner.fitted_devices, the
    preflight's devices check), which the refusal advises."""

    def __init__(
        self, accelerator: str, why: str, advice: str = "fix the driver, or give the count with --devices N"
    ):
        self.reason = f"cannot count this machine's {accelerator} devices: {why}"
        super().__init__(f"{self.reason}; {advice}")


def devices_here(name: str) -> Devices:
    """This machine's devices of accelerator `name`, listed by its profile's command. A listing that
    cannot be made (the tool is missing, fails, lists nothing) is a one-line error: a device count is
    never guessed."""
    listing = accelerators.get(name).devices
    if listing is None:
        return Devices(name, ("cpu",))
    executable = shlex.split(listing.command)[0]
    if shutil.which(executable) is None:
        raise CannotCount(
            name,
            f"{executable} is not on PATH (the driver's tools)",
            "install them, or give the count with --devices N",
        )
    try:
        done = run_tool(listing.command)
    except subprocess.TimeoutExpired as timed_out:
        raise CannotCount(
            name, f"`{listing.command}` gave no answer in {timed_out.timeout:.0f} s (stopped)"
        ) from None
    except OSError as error:
        raise CannotCount(name, f"`{listing.command}` could not run: {error.strerror or error}") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise CannotCount(
            name, f"`{listing.command}` exited {done.returncode}{': ' + said[-1].strip() if said else ''}"
        )
    models: list[str] = []
    lines: list[str] = []
    partitions = 0
    for line in done.stdout.splitlines():
        found = re.search(listing.device, line)
        if found:
            models.append(found.groupdict().get("model") or line.strip())
            lines.append(line)
        elif listing.partition and re.search(listing.partition, line):
            partitions += 1
    if not models:
        raise CannotCount(name, f"`{listing.command}` lists none")
    return Devices(name, tuple(models), partitions, tuple(lines))


def device_count(name: str) -> int:
    """The devices one cell's ranks can use here (one error line where they cannot be counted)."""
    return devices_here(name).count
