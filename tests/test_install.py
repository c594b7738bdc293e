"""The kit installs like a tool: a non-editable install, in a fresh venv outside any checkout, has the
`reprokit` command with every task, its recipes, profiles, templates and trainers."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from reprokit import DISTRIBUTION
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """(a copy of the files git would ship, a folder holding the kit's wheel built from it)."""
    where = tmp_path_factory.mktemp("built")
    wheel_dir = where / "dist"
    # From the files git would ship (setuptools builds in the source tree: a checkout's build/ would
    # be left behind, and reused by the next wheel with whatever it held before).
    source = where / "source"
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        if (ROOT / name).is_symlink():  # reprokit/bundle/'s links: how setuptools finds the data folders
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).symlink_to(os.readlink(ROOT / name))
        elif (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheel_dir), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return source, wheel_dir


# pip installing into another environment (pip --python): the same install as the venv's own pip, without
# bootstrapping a pip into each venv first (ensurepip, 2.7 CPU-s a venv).
PIP_INTO = [sys.executable, "-m", "pip", "--python"]


def _fresh_venv(where: Path) -> Path:
    venv.create(where, with_pip=False)
    return where / "bin" / "python"


@pytest.fixture(scope="module")
def installed(built, tmp_path_factory) -> Path:
    """A venv with the kit's wheel installed (its dependencies from the package index or pip's cache)."""
    where = tmp_path_factory.mktemp("installed")
    (wheel,) = built[1].glob(f"{DISTRIBUTION.replace('-', '_')}-*.whl")
    python = _fresh_venv(where / "venv")
    pip = subprocess.run(
        [*PIP_INTO, str(python), "install", "--quiet", "--disable-pip-version-check", str(wheel)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert pip.returncode == 0, pip.stderr[-2000:]
    return where / "venv" / "bin"


def readme_install_lines() -> list[str]:
    """Every `pip install` and `pipx install` the README shows, in its code blocks and its text."""
    text = (ROOT / "README.md").read_text()
    found = []
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.S):
        for line in block.splitlines():
            command = re.sub(r"\s+#\s.*$", "", line).strip()
            if command.startswith(("pip install ", "pipx install ")):
                found.append(command)
    found += re.findall(r"`((?:pip|pipx) install [^`]+)`", text)
    return list(dict.fromkeys(found))


@pytest.mark.slow
def test_every_install_line_of_the_readme_installs_this_kit(built, tmp_path):
    source, wheel_dir = built
    lines = readme_install_lines()
    # The index's `reprokit` is another project's: the README installs the kit by its own name.
    assert any(f"{DISTRIBUTION}[train]" in line for line in lines), lines
    assert not [line for line in lines if re.search(r"\breprokit\[", line)], lines
    for number, line in enumerate(lines):
        words = shlex.split(line)
        requirement = words[2:]
        target = tmp_path / f"venv{number}"
        # pipx installs with pip into a venv of its own: the same install, here into a fresh venv.
        python = _fresh_venv(target)
        # A name resolves to this checkout's wheel (never the index's); a path is built from the checkout.
        where = [] if requirement[0].startswith(".") else ["--no-index", "--find-links", str(wheel_dir)]
        done = subprocess.run(
            [*PIP_INTO, str(python), "install", "--quiet", "--disable-pip-version-check", "--no-deps",
             *where, *requirement],
            cwd=source, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, f"{line}: {done.stderr[-2000:]}"
        probe = (
            "import importlib.metadata as m, json, reprokit; "
            f"d = m.distribution({DISTRIBUTION!r}); "
            "print(json.dumps([reprokit.__file__, d.metadata.get_all('Provides-Extra'), "
            "d.read_text('entry_points.txt')]))"
        )
        shown = subprocess.run([str(python), "-c", probe], cwd=tmp_path, capture_output=True, text=True)
        assert shown.returncode == 0, f"{line}: {shown.stderr[-2000:]}"
        module, extras, entry_points = json.loads(shown.stdout)
        installed_tasks = Path(module).parent / "cli" / "tasks.py"
        # This kit's code, installed into the venv (not a checkout on the path, not someone else's).
        assert Path(module).is_relative_to(target), (line, module)
        assert installed_tasks.read_bytes() == (ROOT / "reprokit" / "cli" / "tasks.py").read_bytes(), line
        assert "reprokit = reprokit.cli.main:main" in entry_points, line
        asked = re.findall(r"\[([\w,]+)\]", " ".join(requirement))
        assert {e for group in asked for e in group.split(",")} <= set(extras), (line, extras)


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
        "install the kit with its train extra (pip install 'reprokit-bench[train]')"
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


def test_every_python_package_and_data_folder_of_the_tree_ships_in_the_wheel(built):
    # setuptools finds the packages (pyproject.toml): a new folder of modules, a new trainer, a new
    # partial or lock must reach the wheel without anyone listing it.
    import zipfile

    (wheel,) = built[1].glob("*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    packages = {
        init.relative_to(base).as_posix()
        for base in (ROOT, ROOT / "scripts")
        for top in ("reprokit", "reprokit_trainers")
        for init in (base / top).rglob("__init__.py")
    }
    data = {
        f"reprokit/bundle/{inside}/{path.relative_to(ROOT / folder).as_posix()}"
        for inside, folder, patterns in (
            ("recipes", "recipes", ("*.yaml", "*.md")),
            ("docker", "docker", ("*.j2", "*.yaml", "locks/*.txt", "partials/*.j2")),
            ("jobs", "scripts/jobs", ("*.j2",)),
        )
        for pattern in patterns
        for path in (ROOT / folder).glob(pattern)
    }
    assert packages and data and packages | data <= shipped, sorted((packages | data) - shipped)
    assert not [name for name in shipped if "__pycache__" in name or name.endswith(".pyc")]
