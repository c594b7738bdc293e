"""Fake driver tools on PATH that print what the real ones print: `nvidia-smi -L` and `nvidia-smi
--query-gpu=name --format=csv,noheader` (NVIDIA's driver), `hl-smi -L` and `hl-smi -Q name -f
csv,noheader` (Habana's). A fake can also fail as a broken driver does (an exit code and its message)
or hang, leaving a child of its own, as a wedged driver's tool does; it writes the pids it started to
`<bin>/pids` so a test can see whether anything outlived the kit."""

from __future__ import annotations

from pathlib import Path

# The names as the drivers print them (nvidia-smi's `name`, hl-smi's `name`), by recipe device key.
NVIDIA = {
    "h100": "NVIDIA H100 80GB HBM3",
    "h100-pcie": "NVIDIA H100 PCIe",
    "h100-nvl": "NVIDIA H100 NVL",
    "h200": "NVIDIA H200",
    "h200-nvl": "NVIDIA H200 NVL",
    "a100-40gb": "NVIDIA A100-SXM4-40GB",
    "a100-80gb": "NVIDIA A100-SXM4-80GB",
    "a100-40gb-pcie": "NVIDIA A100-PCIE-40GB",
    "a100-80gb-pcie": "NVIDIA A100 80GB PCIe",
}
HABANA = {
    "HL-225": "gaudi2",  # a Gaudi2 OAM module, as hl-smi names it
    "HL-225B": "gaudi2",
    "HL-225C": "gaudi2",
    "HL-225D": "gaudi2",
    "HL-225H": "gaudi2",
    "GAUDI2": "gaudi2",  # torch.hpu.get_device_name()
    "HL-325L": "gaudi3",
    "HL-325": "gaudi3",
    "HL-338": "gaudi3",
    "GAUDI3": "gaudi3",
}


def _tool(bin_dir: Path, name: str, body: str) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\necho $$ >> {bin_dir / 'pids'}\n{body}")
    path.chmod(0o755)
    return path


def _failing(exit_code: int | None, message: str, hang: bool, pids: Path) -> str | None:
    if hang:
        # A child of its own, as a wedged tool's worker: it must not outlive the kit's limit either.
        return f"sleep 600 &\necho $! >> {pids}\nwait\n"
    if exit_code is not None:
        return f"cat >&2 <<'EOF'\n{message}\nEOF\nexit {exit_code}\n"
    return None


def nvidia_smi(
    bin_dir: Path,
    names: list[str],
    exit_code: int | None = None,
    hang: bool = False,
    message: str = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.",
) -> Path:
    """A fake nvidia-smi listing `names`, one GPU each (or failing: `exit_code`, `hang`)."""
    failing = _failing(exit_code, message, hang, bin_dir / "pids")
    if failing is not None:
        return _tool(bin_dir, "nvidia-smi", failing)
    listing = "\n".join(
        f"GPU {i}: {name} (UUID: GPU-{i:08x}-7c1e-4a52-9d63-5f0e8b2a{i:04x})" for i, name in enumerate(names)
    )
    query = "\n".join(names)
    return _tool(
        bin_dir,
        "nvidia-smi",
        'case "$*" in\n'
        f"  -L) cat <<'EOF'\n{listing}\nEOF\n;;\n"
        f"  *--query-gpu=name*) cat <<'EOF'\n{query}\nEOF\n;;\n"
        "  *) echo 'nvidia-smi (fake): not modelled' >&2; exit 2 ;;\nesac\n",
    )


def hl_smi(bin_dir: Path, names: list[str], exit_code: int | None = None, hang: bool = False) -> Path:
    """A fake hl-smi listing `names`, one AIP each (or failing: `exit_code`, `hang`)."""
    failing = _failing(exit_code, "hl-smi: no AIP found (driver not loaded?)", hang, bin_dir / "pids")
    if failing is not None:
        return _tool(bin_dir, "hl-smi", failing)
    aips = "\n".join(
        f"AIP (accel{i}) 0000:{0x19 + i:02x}:00.0:\n        Product Name : {name}"
        for i, name in enumerate(names)
    )
    query = "\n".join(names)
    return _tool(
        bin_dir,
        "hl-smi",
        'case "$*" in\n'
        f"  -L) cat <<'EOF'\n{aips}\nEOF\n;;\n"
        f"  '-Q name -f csv,noheader') cat <<'EOF'\n{query}\nEOF\n;;\n"
        "  *) echo 'hl-smi (fake): not modelled' >&2; exit 2 ;;\nesac\n",
    )


def pids(bin_dir: Path) -> list[int]:
    """What the fakes started (their own pids and their children's)."""
    path = bin_dir / "pids"
    return [int(line) for line in path.read_text().split()] if path.exists() else []
