"""Pins that resolve on each base: the profile's requirements resolved by pip against what the base
image ships, without pulling the base.

The base is modelled as a virtual environment of the base's Python in which every package of its
manifest (bases.yaml `ships`) is installed as an empty stub distribution at the base's version, so
that pip sees it as installed, exactly as it would inside the image. `pip install --dry-run
--report` then says what the image's pip layer would install, and whether it would replace
something the base provides. The whole installed set is the profile's lock (locks/<profile>.txt):
builds install it as constraints and wheelhouses download exactly it.
"""

from __future__ import annotations

import base64
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

from reprokit.errors import ReprokitError
from reprokit.plan.accelerators import Base, Profile

# Packages the kit's pip layer must never bring: the base's framework and the GPU stacks it was built with.
FRAMEWORK = re.compile(r"^(torch|torchvision|torchaudio|triton|nvidia-.*|cuda-.*|habana-.*)$")
PIP_TIMEOUT_S = 900
# The pip of the base model when the manifest names none: the oldest that resolves for a platform in a
# dry run (`--platform` with `--dry-run`).
MODEL_PIP = "24.2"


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def platform_flags(glibc: str) -> list[str]:
    """The manylinux tags a system with this glibc accepts (pip matches each tag exactly)."""
    newest = int(glibc.split(".")[1])
    tags = ["manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64"]
    tags += [f"manylinux_2_{minor}_x86_64" for minor in range(5, newest + 1)]
    return [flag for tag in tags for flag in ("--platform", tag)]


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


def stub_wheel(folder: Path, name: str, version: str) -> Path:
    """An empty wheel that installs only NAME-VERSION.dist-info: pip then sees NAME==VERSION installed."""
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
    path = folder / f"{dist}-{version.replace('-', '_')}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name_in_zip, text in files.items():
            wheel.writestr(name_in_zip, text)
    return path


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


def _base_environment(base: Base, where: Path) -> Path:
    """A venv of the base's Python, with the base's pip and its packages installed as stubs; returns
    its python."""
    python = find_python(base.python)
    _run(
        [str(python), "-m", "venv", "--without-pip", str(where / "venv")],
        f"cannot make a Python {base.python} venv",
    )
    target = where / "venv" / "bin" / "python"
    # The base's own pip (its version decides how it resolves), run from its wheel to install itself.
    version = base.ships.get("pip", MODEL_PIP)
    _run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
         "--disable-pip-version-check", "-d", str(where), f"pip=={version}"],
        f"cannot download pip {version}",
    )  # fmt: skip
    (wheel,) = where.glob("pip-*.whl")
    _run(
        [str(target), f"{wheel}/pip", "install", "--quiet", "--no-index", "--no-deps", str(wheel)],
        "cannot install pip",
    )
    # The base's own builds (its framework, vendor versions pip cannot fetch) as stubs; the rest as the
    # real packages at the base's versions, whose dependencies and extras pip must see.
    protected = {normalize(n) for n in base.protect}
    stubs = where / "stubs"
    stubs.mkdir()
    wheels = [str(stub_wheel(stubs, n, v)) for n, v in base.ships.items() if normalize(n) in protected]
    real = [f"{n}=={v}" for n, v in base.ships.items() if normalize(n) not in protected and n != "pip"]
    quiet = ["-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check"]
    if wheels:
        _run([str(target), *quiet, "--no-index", *wheels], f"cannot make the model of {base.name}")
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
            command += ["-c", str(lock)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
        shown = [str(c) for c in command]
        if done.returncode != 0:
            return Resolution(
                profile.name, base.name, False, _why(done.stdout + "\n" + done.stderr), command=shown
            )
        installs = json.loads(report.read_text())["install"]
    install = {normalize(i["metadata"]["name"]): i["metadata"]["version"] for i in installs}
    shipped = {normalize(n): v for n, v in base.ships.items()}
    replaced = {n: (shipped[n], v) for n, v in install.items() if n in shipped}
    # Where the base ships the framework, the pip layer must not bring another (a profile that pins
    # torch itself, as the cpu one does, brings its own on purpose).
    framework = (
        sorted(n for n in install if FRAMEWORK.match(n) and n not in requirements_names(wanted))
        if "torch" in shipped
        else []
    )
    return Resolution(profile.name, base.name, True, None, install, replaced, framework, shown)


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


def lock_text(resolution: Resolution, base: Base) -> str:
    header = (
        f"# The {resolution.profile} image's pip layer, resolved against {base.reference} (bases.yaml "
        f"{base.name}) by `inv pins --accelerator {resolution.profile} --write`.\n"
        "# Builds install the profile's requirements with this file as constraints; wheelhouses download it.\n"
    )
    return header + "".join(f"{name}=={version}\n" for name, version in sorted(resolution.install.items()))


def read_lock(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    found = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            found[normalize(name)] = version
    return found
