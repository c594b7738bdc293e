"""The kit installs like a tool: a non-editable install, in a fresh venv outside any checkout, has the
`reprokit` command with every task, its recipes, profiles, templates and trainers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A venv with the kit's wheel installed (its dependencies from the package index or pip's cache)."""
    where = tmp_path_factory.mktemp("installed")
    wheel_dir = where / "dist"
    # From the files git would ship (setuptools builds in the source tree: a checkout's build/ would
    # be left behind, and reused by the next wheel with whatever it held before).
    source = where / "source"
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheel_dir), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = wheel_dir.glob("reprokit-*.whl")
    venv.create(where / "venv", with_pip=True)
    python = where / "venv" / "bin" / "python"
    pip = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert pip.returncode == 0, pip.stderr[-2000:]
    return where / "venv" / "bin"


def _run(bin_dir: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
def test_a_wheel_installed_outside_the_checkout_runs_every_task(installed, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    version = _run(installed, elsewhere, str(installed / "python"), "-m", "reprokit", "--version")
    assert version.returncode == 0 and version.stdout.strip() == "reprokit 0.1.0", version.stderr
    listed = _run(installed, elsewhere, "reprokit", "--list")
    for name in (
        "recipes",
        "show",
        "render",
        "build",
        "wheelhouse",
        "export",
        "run",
        "reproduce",
        "collect",
        "report",
    ):
        assert f"  {name} " in listed.stdout, listed.stdout
    found = _run(installed, elsewhere, "reprokit", "recipes")
    assert found.returncode == 0, found.stderr
    assert {"bridgetower", "volo", "vit-speedups"} <= {
        line.split()[0] for line in found.stdout.splitlines() if not line.startswith(" ")
    }
    shown = _run(installed, elsewhere, "reprokit", "show", "bridgetower", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["cells"][0]["trainer"] == "bridgetower"
    dry = _run(
        installed, elsewhere, "reprokit", "reproduce", "bridgetower", "--dry-run", "--accelerator", "cpu"
    )
    assert dry.returncode == 0, dry.stderr
    assert "-m reprokit_trainers.bridgetower" in dry.stdout
    rendered = _run(installed, elsewhere, "reprokit", "render", "volo", "--accelerator", "cuda")
    assert rendered.returncode == 0, rendered.stderr
    context = elsewhere / "rendered" / "docker" / "cuda"
    # The image's build context carries the installed trainers (read as package data, not from a checkout).
    assert (context / "Dockerfile").exists() and (context / "reprokit_trainers" / "volo").is_dir()
    assert not list(elsewhere.rglob("__pycache__"))

    # Without the train extra, the trainers cannot run in this Python: said before the first cell.
    smoke = ("reprokit", "run", "bridgetower", "--accelerator", "cpu", "--scale", "smoke", "--runtime", "local",
             "--variant", "workers0", "--out", str(elsewhere / "results"))  # fmt: skip
    refused = _run(installed, elsewhere, *smoke)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert (
        "install the kit with its train extra (pip install 'reprokit[train]')"
        in refused.stderr.splitlines()[-1]
    )
    assert not list((elsewhere / "results").glob("*/runs/*/stdout.log"))


@pytest.mark.slow
def test_a_wheel_installed_outside_the_checkout_runs_a_smoke_cell(installed, tmp_path):
    # The train extra's packages: this checkout's venv's (the same pins), seen through a .pth file, so
    # that the kit itself is the wheel's and the trainers are the ones it installed.
    site = next((installed.parent / "lib").glob("python3*/site-packages"))
    (site / "zz-train-extra.pth").write_text(
        "".join(f"{p}\n" for p in sys.path if p.endswith("site-packages"))
    )
    try:
        done = _run(installed, tmp_path, "reprokit", "run", "bridgetower", "--accelerator", "cpu", "--scale", "smoke",
                    "--runtime", "local", "--variant", "workers0", "--out", str(tmp_path / "results"))  # fmt: skip
    finally:
        (site / "zz-train-extra.pth").unlink()
    assert done.returncode == 0, done.stderr[-3000:]
    (summary,) = (tmp_path / "results").glob("*/runs/bridgetower--workers0/summary.json")
    assert json.loads(summary.read_text())["status"] == "ok"


def test_every_python_package_of_the_tree_ships_in_the_wheel():
    # pyproject lists the packages by hand: a new folder of modules must not be left out of the wheel.
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(base).parts)
        for base in (ROOT, ROOT / "scripts")
        for top in ("reprokit", "reprokit_trainers")
        for init in (base / top).rglob("__init__.py")
        if (base / top).is_dir()
    }
    assert found and found <= listed, sorted(found - listed)
