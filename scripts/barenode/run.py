#!/usr/bin/env python3
"""The one command on a bare GPU node: install the bundle into a private prefix, then run a slice.

    python3 scripts/barenode/run.py a --bundle node-bundle --out node-out --budget-s 450
    python3 scripts/barenode/run.py d b c --budget-s 500      # in turn, as many as the budget holds

Runs with the node's own python3 and nothing but the standard library until the bundle is in place:

1. checks every wheel of the bundle against its manifest's sha256 (one line and exit 2 on a mismatch);
2. installs the wheels with `pip install --no-index --no-deps --target PREFIX` (the node's Python and
   its site-packages are never written to; a prefix already holding this bundle is reused; without
   pip, the wheels are unpacked into the prefix, and it says so);
3. checks that the node has every package the bundle relies on it for (the manifest's `from_node`);
4. runs `python -m reprokit.barenode run SLICE` with the prefix first on PYTHONPATH (ahead of the
   node's site-packages: the bundle's transformers 4.49 wins over the node's), the kit and its
   trainers from this checkout, and the hub clients offline. Several slices run in turn, each into
   OUT/<slice>/, within the one budget: a slice started late runs the cells that still fit and says
   which do not; one with less than a minute left is not started, and the log says so.

The budget counts from this script's start. Everything that comes back is in --out (README.md,
"On a bare GPU node").
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Under this, a slice is not started: its device check alone takes 10-15 s, and no cell is shorter.
MIN_SLICE_S = 60.0
STAMP = ".reprokit-bundle"  # in the prefix: the manifest's hash of the bundle installed there


def _append(path: Path) -> int:
    """`path` opened for appending; a link planted at its name is replaced, never written through."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
    try:
        return os.open(path, flags, 0o644)
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
    os.unlink(path)
    return os.open(path, flags | os.O_EXCL, 0o644)


def say(out: Path, text: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {text}"
    print(line, flush=True)
    with os.fdopen(_append(out / "runner.log"), "a") as fh:
        fh.write(line + "\n")


def stop(out: Path, text: str, code: int = 2) -> None:
    say(out, f"error: {text}")
    sys.exit(code)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verified(bundle: Path, out: Path) -> dict:
    try:
        manifest = json.loads((bundle / "manifest.json").read_text())
    except (OSError, ValueError) as error:
        stop(
            out,
            f"{bundle / 'manifest.json'}: not a bundle ({error}); make one with `python -m reprokit.barenode bundle`",
        )
    node = manifest.get("node", {})
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if node.get("python") != here:
        stop(
            out,
            f"{bundle} was made for Python {node.get('python')}, this is {here} ({sys.executable}): rebuild it with --python-version {here}",
        )
    for entry in manifest["wheels"]:
        path = bundle / "wheels" / entry["file"]
        if not path.is_file():
            stop(out, f"{path}: missing from the bundle")
        if sha256(path) != entry["sha256"]:
            stop(out, f"{path}: its sha256 is not the manifest's (a damaged copy?)")
    return manifest


def unpack(wheel: Path, prefix: Path) -> None:
    """What pip --target does with a wheel, for a node without pip: its files into the prefix, its
    .data/purelib and platlib folders merged into it."""
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            parts = name.split("/")
            if len(parts) > 2 and parts[0].endswith(".data"):
                if parts[1] not in ("purelib", "platlib"):
                    continue
                parts = parts[2:]
            target = prefix.joinpath(*parts)
            if name.endswith("/"):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(name) as source, open(target, "wb") as sink:
                shutil.copyfileobj(source, sink)


def install(bundle: Path, manifest: dict, prefix: Path, out: Path) -> None:
    digest = hashlib.sha256(json.dumps(manifest["wheels"], sort_keys=True).encode()).hexdigest()
    if (prefix / STAMP).is_file() and (prefix / STAMP).read_text().strip() == digest:
        say(out, f"bundle: already installed in {prefix}")
        return
    if prefix.exists():
        shutil.rmtree(prefix)
    prefix.mkdir(parents=True)
    wheels = [str(bundle / "wheels" / e["file"]) for e in manifest["wheels"]]
    started = time.time()
    has_pip = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode == 0
    if has_pip:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "--isolated", "install", "--no-index", "--no-deps", "--no-compile",
             "--disable-pip-version-check", "--quiet", "--target", str(prefix), *wheels],
            capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or ["no output"])[-1]
            stop(out, f"pip could not install the bundle into {prefix}: {said}")
    else:
        say(out, "bundle: this Python has no pip; unpacking the wheels into the prefix instead")
        for wheel in wheels:
            unpack(Path(wheel), prefix)
    (prefix / STAMP).write_text(digest + "\n")
    mib = sum(e["bytes"] for e in manifest["wheels"]) / 2**20
    say(
        out,
        f"bundle: {len(wheels)} wheels ({mib:.1f} MiB) installed in {prefix} in {time.time() - started:.0f} s",
    )


def node_has(manifest: dict, out: Path) -> None:
    """The packages the bundle relies on the node for, looked up in the node's Python alone."""
    missing, other = [], []
    for name, version in manifest.get("from_node", {}).items():
        try:
            found = metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
            continue
        if found != version:
            other.append(f"{name} {found} (bundle made against {version})")
    if missing:
        stop(
            out,
            f"the node lacks {', '.join(missing)}, which the bundle relies on it for: add them to `lacks` in "
            "reprokit/barenode/node.yaml and rebuild the bundle",
        )
    if other:
        say(out, f"node: other versions than the bundle was resolved against: {'; '.join(other[:8])}")


def main(argv: list[str] | None = None) -> int:
    started = time.time()
    parser = argparse.ArgumentParser(prog="scripts/barenode/run.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("slices", nargs="+", metavar="slice",
                        help="a slice of reprokit/barenode/slices.yaml (a, b, c, d); several run in turn, each into OUT/<slice>/")  # fmt: skip
    parser.add_argument("--bundle", type=Path, default=REPO / "node-bundle", help="the bundle's folder")
    parser.add_argument("--out", type=Path, default=REPO / "node-out",
                        help="a folder for what the run gives: rows, checks, log, archive (default node-out/)")  # fmt: skip
    parser.add_argument("--budget-s", type=float, default=450.0,
                        help="the whole run's wall time in seconds, install included (default 450)")  # fmt: skip
    parser.add_argument("--scratch", type=Path, default=REPO / "node-scratch",
                        help="the prefix, the session, synthetic data, checkpoints (default node-scratch/)")  # fmt: skip
    parser.add_argument("--slices-file", type=Path, help="slices of your own (default: the kit's)")
    parser.add_argument("--accelerator", default="cuda", help="what the cells are planned for (default cuda)")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    scratch = args.scratch.resolve()
    prefix = scratch / "prefix"
    say(out, f"node: {sys.executable} (Python {sys.version.split()[0]}), bundle {args.bundle}, out {out}")
    manifest = verified(args.bundle.resolve(), out)
    install(args.bundle.resolve(), manifest, prefix, out)
    node_has(manifest, out)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(prefix), str(REPO), str(REPO / "scripts"), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
        "REPROKIT_BUNDLE_PREFIX": str(prefix),
        "REPROKIT_NODE_STARTED": str(started),
        # No network here: the hub clients answer from their caches at once instead of retrying.
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "MPLBACKEND": "Agg",
        "PYTHONUNBUFFERED": "1",
    }

    def command(name: str, into: Path) -> list[str]:
        found = [sys.executable, "-m", "reprokit.barenode", "run", name, "--out", str(into),
                 "--scratch", str(scratch), "--budget-s", str(args.budget_s), "--accelerator", args.accelerator]  # fmt: skip
        return found + (["--slices-file", str(args.slices_file.resolve())] if args.slices_file else [])

    sys.stdout.flush()
    if len(args.slices) == 1:
        # The runner takes this process's place: a time limit's SIGTERM reaches it directly.
        os.execve(sys.executable, command(args.slices[0], out), env)
    return in_turn(args.slices, out, started, args.budget_s, command, env)


def in_turn(
    names: list[str],
    out: Path,
    started: float,
    budget_s: float,
    command: Callable[[str, Path], list[str]],
    env: dict,
) -> int:
    """Each slice's runner in turn, into out/<slice>/, all counting from the one start; the worst
    exit status (2 before 1 before 0). A signal stops the running slice as it would stop it alone."""
    running: list[subprocess.Popen] = []

    def forward(signum: int, _frame: object) -> None:
        for child in running:
            if child.poll() is None:
                child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, forward)
    worst = 0
    for name in names:
        left = budget_s - (time.time() - started)
        if left < MIN_SLICE_S:
            say(out, f"slice {name}: not started, {max(left, 0):.0f} s of --budget-s {budget_s:.0f} left")
            worst = max(worst, 1)
            continue
        child = subprocess.Popen(command(name, out / name), env=env)
        running[:] = [child]
        code = child.wait()
        say(out, f"slice {name}: exit {code} at {time.time() - started:.0f} s")
        worst = max(worst, 2 if code not in (0, 1) else code)
    return worst


if __name__ == "__main__":
    sys.exit(main())
