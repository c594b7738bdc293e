"""What the trainers' import probe answered in this machine's Python, kept by what decides it: a second
dry run or preflight of an unchanged environment starts no Python that imports torch (seconds each).

One answer is kept per trainer module (checks/trainers.py asks a child only for the modules without
one). The key is what an import's outcome rests on: the interpreter (its folder and file), the probe's
code and the module, the PYTHONPATH given, every trainer source file (path, size, modification time),
each folder the child imports from as a whole (its working folder, the PYTHONPATH's, the interpreter's
site-packages: a folder's modification time changes when pip installs, upgrades or removes a package
there, a dist-info folder's name carrying the version), and the environment variables that steer
loading native libraries. An answer that counted devices is never kept: devices come and go, and the
count is checked where it is made. An edit inside an installed package that leaves its folder's listing
as it was is not seen; the answer then says it was kept, and the stepped preflight
imports for real. A kept answer that cannot be written costs the next run a Python, nothing else."""

from __future__ import annotations

import hashlib
import json
import os
import site
import sys
from pathlib import Path

from reprokit.preflight import imagereads

# Variables that change what a native extension loads (CUDA, ROCm, Habana libraries) or where Python looks.
STEERING = (
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "PYTHONHOME",
    "PYTHONNOUSERSITE",
    "PYTHONSAFEPATH",
    "VIRTUAL_ENV",
)


KEPT = "as read before in this unchanged Python"


def folder() -> Path:
    return imagereads.folder().parent / "python-reads"


def _stat(path: Path) -> list[int] | None:
    try:
        found = path.stat()
    except OSError:
        return None
    return [found.st_mtime_ns, found.st_size]


def _sources(roots: list[Path]) -> list:
    """Each Python file under the trainers' folders: the code the probe imports from them."""
    return sorted(
        [str(path), *(_stat(path) or [])]
        for root in roots
        for path in root.rglob("*.py")
        if "__pycache__" not in path.parts
    )


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError:  # removed under this process: the child starts nowhere either
        return ""


def keys(argv: list[str], modules: list[str], pythonpath: str, trainer_folders: list[Path]) -> dict[str, str]:
    """Each module's answer key in this process's environment (the probe's child inherits it): `argv`
    the child's arguments before the module (the probe's code); `trainer_folders`: the folders whose
    every source file is read into it (the kit's trainers, a user's under development). What the keys
    share (every trainer file's and folder's state) is read once, not once a module."""
    interpreter = Path(sys.executable)
    # The folders the child imports from: its working folder (first for `python -c`), the PYTHONPATH
    # given and the interpreter's site-packages. Not this process's own path, which holds what the child
    # never sees (inv's bin/, the tasks folder invoke inserts, a test runner's): a dry run through `inv`
    # and the same one through the Python API asked again.
    site_folders = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    path_entries = [_cwd(), *(p for p in pythonpath.split(os.pathsep) if p), *site_folders]
    facts = {
        # Its folder (a venv's, which pyvenv.cfg beside it decides), not its name: python and python3 there
        # are one interpreter.
        "python": [
            str(interpreter.parent),
            str(interpreter.resolve()),
            _stat(interpreter.resolve()),
            sys.version,
        ],
        "pythonpath": pythonpath,
        "trainers": _sources(trainer_folders),
        "folders": {entry: _stat(Path(entry)) for entry in dict.fromkeys(path_entries)},
        "environment": {name: os.environ.get(name) for name in STEERING},
    }
    return {
        module: hashlib.sha256(
            json.dumps({**facts, "argv": [*argv, module]}, sort_keys=True).encode()
        ).hexdigest()
        for module in modules
    }


def kept(name: str) -> str | None:
    answer = imagereads.kept(folder() / name)
    try:
        return None if answer is None else answer.decode()
    except UnicodeDecodeError:  # not what keep() wrote: asked again
        return None


def keep(name: str, output: str) -> None:
    imagereads.keep(folder() / name, output.encode())
