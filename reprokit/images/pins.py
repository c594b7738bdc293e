"""Pins that resolve on each base: the profile's requirements resolved by pip against what the base
image ships, without pulling the base.

The base is modelled as a virtual environment of the base's Python in which every package of its
manifest (its base.yaml `ships`) is installed as an empty stub distribution at the base's version, so
that pip sees it as installed, exactly as it would inside the image. `pip install --dry-run
--report` then says what the image's pip layer would install, and whether it would replace
something the base provides. The whole installed set is the profile's lock (accelerators/<profile>/lock.txt),
each pin with the sha256 of every wheel of its version that the base's Python and platform can
install (read from the package index, as pip-compile --generate-hashes does): images install exactly
it with --require-hashes, whichever of those files pip picks, and wheelhouses download it.
"""

from __future__ import annotations

import atexit
import base64
import functools
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from reprokit.contract.errors import ReprokitError
from reprokit.images.locks import FRAMEWORK, normalize, read_lock
from reprokit.plan.accelerators import Base, Profile

PIP_TIMEOUT_S = 900
# The pip of the base model when the manifest names none: the oldest that resolves for a platform in a
# dry run (`--platform` with `--dry-run`).
MODEL_PIP = "24.2"


# The legacy manylinux names of glibc 2.17, 2.12 and 2.5 (PEP 600).
LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


def platforms(glibc: str) -> list[str]:
    """The platform tags an x86-64 system with this glibc accepts, newest first, as pip itself orders
    them inside the image (it takes the first tag a wheel matches)."""
    found = []
    for minor in range(int(glibc.split(".")[1]), 4, -1):
        found.append(f"manylinux_2_{minor}_x86_64")
        if minor in LEGACY_MANYLINUX:
            found.append(f"{LEGACY_MANYLINUX[minor]}_x86_64")
    return [*found, "linux_x86_64"]


def platform_flags(glibc: str) -> list[str]:
    """pip's --platform flags for this glibc (pip matches each tag exactly), in pip's order of preference."""
    return [flag for tag in platforms(glibc) for flag in ("--platform", tag)]


def supported_tags(python: str, glibc: str) -> frozenset:
    """Every wheel tag CPython `python` on an x86-64 glibc `glibc` installs (packaging's tags, as pip's)."""
    from packaging import tags

    major, minor = (int(part) for part in python.split(".")[:2])
    interpreter = f"cp{major}{minor}"
    found = [
        *tags.cpython_tags((major, minor), abis=[interpreter], platforms=platforms(glibc)),
        *tags.compatible_tags((major, minor), interpreter=interpreter, platforms=platforms(glibc)),
    ]
    return frozenset(found)


def find_python(version: str) -> Path:
    """An interpreter of `version` on this machine: python3.X on PATH, or a pyenv build."""
    root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    candidates = sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}"), reverse=True)
    candidates.append(shutil.which(f"python{version}"))
    for candidate in candidates:
        # A pyenv shim answers for every version but runs only the selected one: ask it.
        if candidate and subprocess.run([candidate, "-c", ""], capture_output=True).returncode == 0:
            return Path(candidate)
    raise ReprokitError(
        f"no Python {version} on this machine to resolve for the base's Python "
        f"(install it, e.g. `pyenv install {version}`, or put python{version} on PATH)"
    )


def stub_distribution(site: Path, name: str, version: str) -> None:
    """NAME-VERSION.dist-info alone in `site` (site-packages), as an empty wheel would install it: pip
    then sees NAME==VERSION installed."""
    dist = re.sub(r"[-_.]+", "_", name)
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        "Summary: reprokit stand-in for a package the base image ships\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: reprokit\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    (site / info).mkdir()
    for path, text in files.items():
        (site / path).write_text(text)


@dataclass
class Resolution:
    profile: str
    base: str
    ok: bool
    error: str | None = None
    install: dict[str, str] = field(default_factory=dict)
    # base package -> (its version in the base, the version the pip layer would put instead)
    replaced: dict[str, tuple[str, str]] = field(default_factory=dict)
    framework: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    # package -> the sha256 of the file pip chose for it in the dry run
    chosen: dict[str, str] = field(default_factory=dict)

    def problems(self, base: Base) -> list[str]:
        """Why this resolution would not build on the base (empty: it would)."""
        if not self.ok:
            return [self.error or "pip could not resolve the requirements"]
        found = [
            f"replaces the base's {name} {old} with {new}"
            for name, (old, new) in self.replaced.items()
            if name not in {normalize(n) for n in base.may_replace}
        ]
        found += [
            f"pulls {name} {self.install[name]}, a framework package: the base's torch stack must be the one used"
            for name in self.framework
        ]
        return found


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise ReprokitError(f"{what}: {lines[-1] if lines else f'exit {done.returncode}'}")


@functools.cache
def _pip_wheel(version: str) -> Path:
    """pip's wheel of `version`, downloaded once a process (each resolution's model installs it), into
    a folder removed when the process ends."""
    folder = Path(tempfile.mkdtemp(prefix="reprokit-pip-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    _run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
         "--disable-pip-version-check", "-d", str(folder), f"pip=={version}"],
        f"cannot download pip {version}",
    )  # fmt: skip
    (wheel,) = folder.glob("pip-*.whl")
    return wheel


def _unpack(wheel: Path, site: Path) -> None:
    """A pure-Python wheel installed as pip installs it: its files laid out in site-packages (a wheel is
    them, as installed; the model runs none of its console scripts). A pip run for each install was
    1-1.5 CPU-s of every resolution."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)


def _base_environment(base: Base, where: Path) -> Path:
    """A venv of the base's Python, with the base's pip and its packages installed as stubs; returns
    its python."""
    python = find_python(base.python)
    _run(
        [str(python), "-m", "venv", "--without-pip", str(where / "venv")],
        f"cannot make a Python {base.python} venv",
    )
    target = where / "venv" / "bin" / "python"
    (site,) = (where / "venv" / "lib").glob("python*/site-packages")
    # The base's own pip (its version decides how it resolves).
    _unpack(_pip_wheel(base.ships.get("pip", MODEL_PIP)), site)
    # The base's own builds (its framework, vendor versions pip cannot fetch) as stubs; the rest as the
    # real packages at the base's versions, whose dependencies and extras pip must see.
    protected = {normalize(n) for n in base.protect}
    for n, v in base.ships.items():
        if normalize(n) in protected:
            stub_distribution(site, n, v)
    real = [f"{n}=={v}" for n, v in base.ships.items() if normalize(n) not in protected and n != "pip"]
    # No bytecode: the model is only read by pip's resolver, never imported (sympy's alone was 5 CPU-s).
    quiet = ["-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", "--disable-pip-version-check"]
    if real:
        _run(
            [str(target), *quiet, "--only-binary=:all:", *real],
            f"cannot install {base.name}'s own packages into its model",
        )
    return target


def resolve(profile: Profile, requirements: list[str] | None = None, lock: Path | None = None) -> Resolution:
    """What the profile's pip layer would install on its base (a dry run against the base's model)."""
    base = profile.base_manifest
    wanted = list(requirements if requirements is not None else profile.requirements)
    with tempfile.TemporaryDirectory(prefix="reprokit-pins-") as tmp:
        where = Path(tmp)
        python = _base_environment(base, where)
        (where / "requirements.txt").write_text("".join(f"{line}\n" for line in wanted))
        # The base's own versions hold: what it ships is a constraint, as inside the image.
        (where / "base.txt").write_text(
            "".join(f"{n}=={v}\n" for n, v in base.ships.items() if n in base.protect)
        )
        report = where / "report.json"
        command = [
            str(python), "-m", "pip", "install", "--dry-run", "--disable-pip-version-check",
            "--only-binary=:all:", *platform_flags(base.glibc), "--report", str(report),
            "-r", str(where / "requirements.txt"), "-c", str(where / "base.txt"),
        ]  # fmt: skip
        if lock is not None:
            # The lock's versions hold, but for the profile's own pins, which say theirs. Versions only:
            # hashes in a constraints file turn on pip's hash checking, which downloads every file in
            # full (gigabytes) where the resolution needs only their metadata.
            own = requirements_names(wanted)
            kept = {n: v for n, v in read_lock(lock).items() if n not in own}
            (where / "lock.txt").write_text("".join(f"{n}=={v}\n" for n, v in kept.items()))
            command += ["-c", str(where / "lock.txt")]
        done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
        shown = [str(c) for c in command]
        if done.returncode != 0:
            return Resolution(
                profile.name, base.name, False, _why(done.stdout + "\n" + done.stderr), command=shown
            )
        installs = json.loads(report.read_text())["install"]
    install = {normalize(i["metadata"]["name"]): i["metadata"]["version"] for i in installs}
    chosen = {normalize(i["metadata"]["name"]): _sha256_of(i) for i in installs if _sha256_of(i)}
    shipped = {normalize(n): v for n, v in base.ships.items()}
    replaced = {n: (shipped[n], v) for n, v in install.items() if n in shipped}
    # Where the base ships the framework, the pip layer must not bring another (a profile that pins
    # torch itself, as the cpu one does, brings its own on purpose).
    framework = (
        sorted(n for n in install if FRAMEWORK.match(n) and n not in requirements_names(wanted))
        if "torch" in shipped
        else []
    )
    return Resolution(profile.name, base.name, True, None, install, replaced, framework, shown, chosen)


def _sha256_of(install: dict) -> str | None:
    """The sha256 of the file pip's report says it would install (its download_info)."""
    archive = (install.get("download_info") or {}).get("archive_info") or {}
    return (archive.get("hashes") or {}).get("sha256")


def requirements_names(lines: list[str]) -> set[str]:
    return {normalize(re.split(r"[=<>!~;\[ ]", line, maxsplit=1)[0]) for line in lines if line.strip()}


def _why(stderr: str) -> str:
    """pip's reason in one line: the conflict it names, else its last error line."""
    lines = [line.strip() for line in stderr.splitlines()]
    if "The conflict is caused by:" in lines:
        start = lines.index("The conflict is caused by:") + 1
        causes = []
        for line in lines[start:]:
            if not line:
                break
            causes.append(line)
        return "conflict: " + "; ".join(causes)
    errors = [line for line in lines if line.startswith("ERROR")]
    return errors[-1] if errors else next((line for line in reversed(lines) if line), "no output")


def lock_text(resolution: Resolution, base: Base, hashes: dict[str, list[str]], index: str) -> str:
    header = (
        f"# The {resolution.profile} image's pip layer, resolved against {base.reference} (base.yaml "
        f"{base.name}) by `inv pins --accelerator {resolution.profile} --write`.\n"
        f"# Each pin has the sha256 of every wheel of its version that Python {base.python} on glibc "
        f"{base.glibc} (x86-64) can install, from {index}:\n"
        "# images install exactly this file with --require-hashes; wheelhouses download it.\n"
    )
    return header + "".join(
        f"{name}=={version}" + "".join(f" --hash=sha256:{digest}" for digest in hashes[name]) + "\n"
        for name, version in sorted(resolution.install.items())
    )
