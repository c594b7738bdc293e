"""`python -m reprokit_trainers.devicecheck --out checks.json [--trainers bridgetower,volo,vit] [--matmul] [--energy]`

What a bare node's first minute establishes before any cell runs (reprokit/barenode/runner.py):

- software: the trainers import, and each package they use is read back with its version and where
  it was loaded from (the bundle's prefix or the node's own Python): the node's torch is what runs;
- device: the CUDA device torch sees (name, memory, capability);
- matmul: the measured dense matmul rate of the device in bf16, fp16, TF32 and fp32 (CUDA events
  around a run of square matmuls): the peak the MFU of a measured cell can be held to;
- energy: NVML's total-energy counter read around the bf16 matmuls: joules, the mean power, and the
  counter's resolution as NVML reports it.

Each item that needs what is not here says so in one line (no CUDA device, no NVML) and the others
still run. The JSON is written at the end; each line is printed as it is known.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from importlib import import_module, metadata
from pathlib import Path
from typing import Any

PACKAGES = (
    "torch",
    "torchvision",
    "transformers",
    "tokenizers",
    "huggingface-hub",
    "datasets",
    "accelerate",
    "timm",
    "numpy",
    "pillow",
    "opencv-python-headless",
    "simplejpeg",
    "nvidia-ml-py",
    "tensorboard",
    "pydantic",
    "invoke",
)

NEEDS_CUDA = "needs CUDA: torch sees no CUDA device here (torch.cuda.is_available() is False)"
MATMUL_SIZE = 8192
MATMUL_ITERATIONS = {"bf16": 100, "fp16": 100, "tf32": 40, "fp32": 10}


def trainer_module(name: str) -> str:
    """What a kit trainer runs (`python -m reprokit_trainers.<name>` starts its `run_<name>.py`): its
    imports are the whole stack the trainer needs, found by the package's layout, never listed here."""
    return f"reprokit_trainers.{name}.run_{name}"


def say(item: str, text: str) -> None:
    print(f"devicecheck: {item}: {text}", flush=True)


def software(trainers: list[str]) -> dict[str, Any]:
    """Versions and origins of the packages, after the trainers imported (their imports are the test)."""
    prefix = os.environ.get("REPROKIT_BUNDLE_PREFIX")
    imported, failed = [], {}
    for name in trainers:
        try:
            import_module(trainer_module(name))
            imported.append(name)
        except Exception as error:  # noqa: BLE001 -- the one line is the finding
            failed[name] = (
                f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
            )
    packages = {}
    for name in PACKAGES:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
            continue
        where = str(Path(str(dist.locate_file(""))).resolve())
        origin = (
            "this Python"
            if not prefix
            else "bundle"
            if where.startswith(str(Path(prefix).resolve()))
            else "node"
        )
        packages[name] = {"version": dist.version, "from": origin, "location": where}
    import torch

    found = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "bundle_prefix": prefix,
        "trainers_imported": imported,
        "trainers_failed": failed,
        "packages": packages,
    }
    origins = ", ".join(
        f"{n} {p['version']} ({p['from']})"
        for n, p in packages.items()
        if p and n in ("torch", "transformers", "timm")
    )
    say(
        "software", f"Python {found['python']}, {origins}; trainers imported: {', '.join(imported) or 'none'}"
    )
    for name, why in failed.items():
        say("software", f"{name} does not import: {why}")
    return found


def device() -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        say("device", NEEDS_CUDA)
        return {"available": False, "why": NEEDS_CUDA}
    props = torch.cuda.get_device_properties(0)
    found = {
        "available": True,
        "name": props.name,
        "count": torch.cuda.device_count(),
        "memory_bytes": props.total_memory,
        "capability": f"{props.major}.{props.minor}",
        "uuid": str(getattr(props, "uuid", "")) or None,
    }
    say(
        "device",
        f"{found['count']} x {props.name}, {props.total_memory / 2**30:.1f} GiB, capability {found['capability']}",
    )
    return found


def _matmul_rate(dtype_name: str, iterations: int) -> float:
    """TFLOP/s of back-to-back square matmuls, timed with CUDA events after a warm-up."""
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}[
        dtype_name
    ]
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype_name == "tf32"
    try:
        a = torch.randn(MATMUL_SIZE, MATMUL_SIZE, device="cuda", dtype=dtype)
        b = torch.randn(MATMUL_SIZE, MATMUL_SIZE, device="cuda", dtype=dtype)
        for _ in range(5):
            torch.matmul(a, b)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(iterations):
            torch.matmul(a, b)
        end.record()
        end.synchronize()
        seconds = start.elapsed_time(end) / 1e3
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return 2 * MATMUL_SIZE**3 * iterations / seconds / 1e12


def _nvml_handle() -> tuple[Any, Any, str | None]:
    """(pynvml, the handle of torch's device 0, why not) found by its UUID (NVML's order is the bus's)."""
    try:
        import pynvml
    except ImportError:
        return None, None, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        return None, None, f"NVML: {error}"
    try:
        import torch

        uuid = getattr(torch.cuda.get_device_properties(0), "uuid", None)
        handle = (
            pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}") if uuid else pynvml.nvmlDeviceGetHandleByIndex(0)
        )
        return pynvml, handle, None
    except pynvml.NVMLError as error:
        return None, None, f"NVML: {error}"


def matmul_and_energy(want_matmul: bool, want_energy: bool) -> dict[str, Any]:
    import torch

    found: dict[str, Any] = {}
    if not torch.cuda.is_available():
        for item in ("matmul", "energy"):
            if (item == "matmul" and want_matmul) or (item == "energy" and want_energy):
                say(item, NEEDS_CUDA)
                found[item] = {"available": False, "why": NEEDS_CUDA}
        return found
    nvml, handle, why = _nvml_handle() if want_energy else (None, None, None)
    if want_energy and nvml is None:
        say("energy", why or "NVML unavailable")
        found["energy"] = {"available": False, "why": why}
    rates: dict[str, float] = {}
    energy: dict[str, Any] = {}
    for name, iterations in MATMUL_ITERATIONS.items():
        if not want_matmul and name != "bf16":
            continue
        counter = None
        if name == "bf16" and nvml is not None:
            try:
                counter = (nvml.nvmlDeviceGetTotalEnergyConsumption(handle), time.perf_counter())
            except nvml.NVMLError as error:
                energy = {"available": False, "why": f"NVML's energy counter: {error}"}
        rates[name] = _matmul_rate(name, iterations)
        if counter is not None:
            torch.cuda.synchronize()
            millijoules = nvml.nvmlDeviceGetTotalEnergyConsumption(handle) - counter[0]
            seconds = time.perf_counter() - counter[1]
            energy = {
                "available": True,
                "joules": millijoules / 1e3,
                "seconds": seconds,
                "mean_watts": millijoules / 1e3 / seconds if seconds > 0 else None,
                "of": "the bf16 matmuls (NVML total-energy counter, millijoules since the driver loaded)",
                "power_limit_watts": nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3,
            }
    if want_matmul:
        found["matmul"] = {"available": True, "tflops": rates, "size": MATMUL_SIZE}
        say(
            "matmul",
            ", ".join(f"{k} {v:.0f} TFLOP/s" for k, v in rates.items()) + f" ({MATMUL_SIZE}^2 matmuls)",
        )
    if want_energy and nvml is not None:
        found["energy"] = energy
        if energy.get("available"):
            say(
                "energy",
                f"{energy['joules']:.1f} J over {energy['seconds']:.2f} s of bf16 matmuls, {energy['mean_watts']:.0f} W mean",
            )
        else:
            say("energy", energy.get("why", "not read"))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reprokit_trainers.devicecheck", description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--trainers",
        default="",
        help="comma-separated kit trainers (folders of reprokit_trainers), e.g. bridgetower,vit",
    )
    parser.add_argument("--matmul", action="store_true")
    parser.add_argument("--energy", action="store_true")
    args = parser.parse_args(argv)
    trainers = [t for t in args.trainers.split(",") if t]
    found: dict[str, Any] = {"software": software(trainers), "device": device()}
    found.update(matmul_and_energy(args.matmul, args.energy))
    args.out.write_text(json.dumps(found, indent=2, default=str) + "\n")
    return 1 if found["software"]["trainers_failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
