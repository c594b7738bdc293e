"""Device counts: what this machine has is listed by the driver's own tool or the run is refused in one
line (never a guessed count), and a layout that cannot hold a cell's ranks (MIG) is refused before
anything runs. A fake nvidia-smi on PATH stands in for the driver's."""

from __future__ import annotations

import os
import sys

import pytest

from reprokit.errors import ReprokitError
from reprokit.plan import accelerators
from reprokit.plan.planner import fitted_devices
from tests.conftest import run_inv

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
    here = accelerators.devices_here("cuda")
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
    here = accelerators.devices_here("cuda")
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
