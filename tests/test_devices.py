"""Device counts: what this machine has is listed by the driver's own tool or the run is refused in one
line (never a guessed count), and a layout that cannot hold a cell's ranks (MIG) is refused before
anything runs. A fake nvidia-smi on PATH stands in for the driver's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reprokit.contract.errors import ReprokitError
from reprokit.plan import accelerators, listing
from reprokit.plan.planner import fitted_devices
from tests.conftest import run_inv
from tests.fakes.drivers import HABANA, NVIDIA, hl_smi, nvidia_smi, pids

H100 = "GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i}0c7f1a2-0000-0000-0000-000000000000)"
MIG_LISTING = "\n".join(
    [
        H100.format(i=0),
        "  MIG 3g.40gb     Device  0: (UUID: MIG-a)",
        "  MIG 3g.40gb     Device  1: (UUID: MIG-b)",
        H100.format(i=1),
        "  MIG 7g.80gb     Device  0: (UUID: MIG-c)",
    ]
)


@pytest.fixture
def path_with(tmp_path, monkeypatch):
    """PATH holding only a fake nvidia-smi that prints `listing` (None: no nvidia-smi at all)."""

    def make(listing: str | None) -> dict[str, str]:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        tool = bin_dir / "nvidia-smi"
        tool.unlink(missing_ok=True)
        if listing is not None:
            tool.write_text(f"#!/bin/sh\ncat <<'EOF'\n{listing}\nEOF\n")
            tool.chmod(0o755)
        path = f"{bin_dir}:/usr/bin:/bin"
        monkeypatch.setenv("PATH", path)
        return {"PATH": f"{bin_dir}:{os.path.dirname(sys.executable)}:/usr/bin:/bin"}

    return make


def test_gpus_are_listed_with_their_model(path_with):
    path_with("\n".join(H100.format(i=i) for i in range(4)))
    here = listing.devices_here("cuda")
    assert (here.count, here.model, here.partitions) == (4, "NVIDIA H100 80GB HBM3", 0)
    assert fitted_devices("cuda", "published", None) == 4  # published 8, capped at what is here
    assert fitted_devices("cuda", "published", 2) == 2


def test_a_published_cell_without_nvidia_smi_is_refused_not_run_on_one_device(path_with):
    env = path_with(None)
    with pytest.raises(
        ReprokitError, match=r"^cannot count this machine's cuda devices: nvidia-smi is not on PATH"
    ):
        fitted_devices("cuda", "published", None)
    result = run_inv(
        "reproduce", "bridgetower", "--accelerator", "cuda", "--runtime", "local", "--dry-run", env=env
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "reprokit: cannot count this machine's cuda devices: nvidia-smi is not on PATH (the driver's tools); "
        "install them, or give the count with --devices N"
    )
    # The user's own count is used as given.
    assert fitted_devices("cuda", "published", 2) == 2


def test_a_failing_or_empty_listing_is_refused(path_with, tmp_path):
    path_with("")
    with pytest.raises(ReprokitError, match="`nvidia-smi -L` lists none"):
        fitted_devices("cuda", "published", None)
    (tmp_path / "bin" / "nvidia-smi").write_text(
        "#!/bin/sh\necho 'NVIDIA-SMI has failed: driver not loaded' >&2\nexit 9\n"
    )
    with pytest.raises(ReprokitError, match="exited 9: NVIDIA-SMI has failed: driver not loaded"):
        fitted_devices("cuda", "published", None)


def test_mig_devices_are_seen_and_a_cell_needing_whole_devices_is_refused(path_with):
    env = path_with(MIG_LISTING)
    here = listing.devices_here("cuda")
    assert (here.count, here.partitions) == (2, 3)
    with pytest.raises(
        ReprokitError,
        match=r"GPUs are in MIG mode \(2 x NVIDIA H100 80GB HBM3, in MIG mode: 3 MIG device\(s\)\)",
    ):
        fitted_devices("cuda", "published", None)
    with pytest.raises(ReprokitError, match="NCCL cannot join MIG devices, so 2 rank"):
        fitted_devices("cuda", "published", 2)
    # One rank on one MIG device, asked for by the user, runs.
    assert fitted_devices("cuda", "published", 1) == 1
    result = run_inv(
        "reproduce", "bridgetower", "--accelerator", "cuda", "--runtime", "local", "--dry-run", env=env
    )
    assert result.returncode == 2
    assert (
        "turn MIG off (nvidia-smi -mig 0, as root), or run one rank on one MIG device with --devices 1"
        in result.stderr
    )


def test_more_devices_than_the_machine_has_are_refused(path_with):
    path_with("\n".join(H100.format(i=i) for i in range(2)))
    with pytest.raises(ReprokitError, match=r"^--devices 8: this machine has 2 x NVIDIA H100 80GB HBM3$"):
        fitted_devices("cuda", "published", 8)


def test_the_smoke_scale_counts_nothing(path_with):
    path_with(None)
    assert fitted_devices("cuda", "smoke", None) is None


# ---- the names the drivers print, each matched to its recipe device key ----------------------------


@pytest.mark.parametrize(("key", "name"), sorted(NVIDIA.items()))
def test_each_name_nvidia_smi_prints_is_its_recipe_device_key(key, name, tmp_path, monkeypatch):
    nvidia_smi(tmp_path / "bin", [name] * 8)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    here = listing.devices_here("cuda")
    assert (here.count, here.model) == (8, name)
    assert accelerators.get("cuda").device_key(here.model) == key
    # As `nvidia-smi --query-gpu=name` and torch.cuda.get_device_name() print it (the trainer records this).
    (listed,) = set(subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                   capture_output=True, text=True, check=True).stdout.splitlines())  # fmt: skip
    assert accelerators.get("cuda").device_key(listed) == key


@pytest.mark.parametrize(("name", "key"), sorted(HABANA.items()))
def test_each_name_hl_smi_prints_is_its_recipe_device_key(name, key, tmp_path, monkeypatch):
    hl_smi(tmp_path / "bin", [name] * 8)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    here = listing.devices_here("gaudi2")
    assert (here.count, here.model) == (8, name)
    assert accelerators.get("gaudi2").device_key(here.model) == key


def test_a_form_factor_is_a_device_of_its_own_and_an_unknown_name_has_no_key():
    cuda = accelerators.get("cuda")
    # The published H100 figures are of SXM boards: a PCIe H100 is not set beside them.
    assert cuda.device_key("NVIDIA H100 PCIe") != cuda.device_key("NVIDIA H100 80GB HBM3")
    assert cuda.device_key("NVIDIA A100 80GB PCIe") != "a100-80gb"
    assert cuda.device_key("NVIDIA GeForce RTX 4090") is None
    assert accelerators.get("gaudi2").device_key("HL-2250") is None


# ---- a listing tool that fails or hangs is a refusal naming it, for `auto` too -------------------------


def test_auto_with_a_failing_nvidia_smi_is_a_refusal_naming_it_not_a_cpu_machine(tmp_path):
    nvidia_smi(tmp_path / "bin", [], exit_code=9)
    env = {"PATH": f"{tmp_path / 'bin'}:{os.path.dirname(sys.executable)}:/usr/bin:/bin"}
    result = run_inv("reproduce", "all", "--dry-run", env=env)
    assert result.returncode != 0, result.stdout
    assert "No accelerator here" not in result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "reprokit: --accelerator auto: the cuda driver's tool does not answer (`nvidia-smi -L` exited 9: "
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
        "NVIDIA driver is installed and running.); fix the driver, or name the accelerator: --accelerator cpu, "
        "or --accelerator cuda --devices N"
    )


def test_the_count_a_broken_drivers_refusal_advises_is_taken_by_the_preflight_as_by_the_dry_run(tmp_path):
    nvidia_smi(tmp_path / "bin", [], exit_code=9)
    env = {
        "PATH": f"{tmp_path / 'bin'}:{os.path.dirname(sys.executable)}:/usr/bin:/bin",
        "HF_HUB_OFFLINE": "1",
    }
    out = ("--container", "none", "--out", str(tmp_path / "out"))
    for refused in (
        run_inv("preflight", "bridgetower", "--no-steps", *out, env=env),
        run_inv("preflight", "bridgetower", "--no-steps", "--accelerator", "cuda", *out, env=env),
    ):
        assert refused.returncode != 0
        assert (
            refused.stderr.strip()
            .splitlines()[-1]
            .endswith(("--accelerator cuda --devices N", "--devices N"))
        )
    # The advice taken: the count is used as given and said unverified, never "cannot count" again; the
    # torch that would run the cells then counts them (here it sees none: this machine has no GPU, truly).
    flags = ("--accelerator", "cuda", "--devices", "8", *out)
    preflight = run_inv("preflight", "bridgetower", "--no-steps", *flags, env=env)
    dry_run = run_inv("reproduce", "bridgetower", "--dry-run", *flags, env=env)
    for result in (preflight, dry_run):
        said = [
            line for line in result.stdout.splitlines() if line.startswith(("  - devices ", "  x devices "))
        ]
        assert said == [
            "  - devices   warning: --devices 8 is used as given, not verified: cannot count this machine's cuda "
            "devices: `nvidia-smi -L` exited 9: NVIDIA-SMI has failed because it couldn't communicate with the "
            "NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."
        ], result.stdout
        assert "cannot count" not in result.stderr.strip().splitlines()[-1]
    assert "--nproc_per_node 8" in dry_run.stdout
    # Both say the same of the session: the same answer per cell, the same first thing to fix.
    assert dry_run.returncode in (0, 3) and preflight.returncode == (1 if dry_run.returncode else 0)
    assert preflight.stderr.strip().splitlines()[-1].removeprefix("reprokit: ") == (
        dry_run.stderr.strip().splitlines()[-1].removeprefix("reprokit: dry run: ")
    )


@pytest.mark.parametrize("tool", ["nvidia-smi", "hl-smi"])
def test_a_hung_listing_tool_is_stopped_with_what_it_started_and_refused(tool, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    (nvidia_smi if tool == "nvidia-smi" else hl_smi)(bin_dir, [], hang=True)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setattr(listing, "TOOL_TIMEOUT_S", 2)
    with pytest.raises(
        ReprokitError, match=rf"^--accelerator auto: .* \(`{tool} -L` gave no answer in 2 s \(stopped\)\)"
    ):
        listing.detect()
    with pytest.raises(ReprokitError, match="gave no answer in 2 s"):
        listing.devices_here("cuda" if tool == "nvidia-smi" else "gaudi2")
    started = pids(bin_dir)
    assert len(started) == 4  # the tool and its child, twice
    # SIGKILL is delivered at once but a process dies on its own time: the child of the second call
    # may have closed its pipes (so the kit read to the end) and not yet become a zombie.
    deadline = time.monotonic() + 5
    while [pid for pid in started if alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in started if alive(pid)]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
