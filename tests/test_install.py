"""The kit installs like a tool: a non-editable install, in a fresh venv outside any checkout, has the
`reprokit` command with every task, its recipes, profiles, templates and trainers. It is not on the
package index: every install line of the pages, and every install command the kit prints, takes it
from a checkout or a wheel, never by name."""

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


def readme_install_lines(page: Path = ROOT / "README.md") -> list[str]:
    """Every `pip install` and `pipx install` a page shows, in its code blocks and its text."""
    text = page.read_text()
    found = []
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.S):
        for line in block.splitlines():
            command = re.sub(r"\s+#\s.*$", "", line).strip()
            if command.startswith(("pip install ", "pipx install ")):
                found.append(command)
    found += re.findall(r"`((?:pip|pipx) install [^`]+)`", text)
    return list(dict.fromkeys(found))


# What names the kit on an index: its distribution, and `reprokit`, which there is another project's.
KIT_NAMES = {re.sub(r"[-_.]+", "-", DISTRIBUTION).lower(), "reprokit"}
WHEEL = f"{DISTRIBUTION.replace('-', '_')}-"  # a wheel's file name: the distribution, then its version


def by_name(line: str) -> list[str]:
    """The requirements of an install line that take the kit by name from an index (where it is not):
    each that is not a path (`.`, `.[train]`, `dist/x.whl`, `/abs`, `file:`) and names the kit."""
    words = shlex.split(line)[2:]
    found = []
    for word in words:
        if word.startswith("-") or word.startswith((".", "/", "~", "file:")) or "/" in word:
            continue
        name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", word)
        if name and re.sub(r"[-_.]+", "-", name.group()).lower() in KIT_NAMES:
            found.append(word)
    return found


def _pages() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "*.md"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    return [ROOT / name for name in filter(None, listed.decode().split("\0"))]


def test_no_page_installs_the_kit_by_name_from_an_index():
    """Before, README.md's "pip install 'reprokit-bench[train]'  # from the package index" and
    reprokit/report/README.md's "reprokit-bench[mlflow]": no index has the kit (pip: No matching
    distribution), and one resolved against the checkout's own wheel (--no-index) passed all the same."""
    found = {
        f"{page.relative_to(ROOT)}: {line}": by_name(line)
        for page in _pages()
        for line in readme_install_lines(page)
        if by_name(line)
    }
    assert found == {}


def test_the_readmes_install_lines_take_this_checkout_or_its_wheel():
    lines = readme_install_lines()
    assert any("[train]" in line for line in lines), lines
    for line in lines:
        for word in shlex.split(line)[2:]:
            if word.startswith("-"):
                continue
            if word.split("[")[0] == ".":
                assert (ROOT / "pyproject.toml").read_text().count(f'name = "{DISTRIBUTION}"') == 1, line
            else:  # a wheel this kit builds: its distribution's file name
                assert Path(word).name.startswith(WHEEL) and word.endswith(".whl"), line


@pytest.mark.parametrize(
    "direct_url, expected",
    [
        ({"url": "file:///home/u/dist/reprokit_bench-0.1.0-py3-none-any.whl", "archive_info": {}},
         "pip install '/home/u/dist/reprokit_bench-0.1.0-py3-none-any.whl[train]'"),
        ({"url": "file:///home/u/my%20kit", "dir_info": {"editable": True}}, "pip install -e '/home/u/my kit[train]'"),
        ({"url": "file:///home/u/kit", "dir_info": {}}, "pip install '/home/u/kit[train]'"),
        ({"url": "https://example.org/reprokit_bench-0.1.0-py3-none-any.whl", "archive_info": {}},
         "pip install 'reprokit-bench[train] @ https://example.org/reprokit_bench-0.1.0-py3-none-any.whl'"),
    ],
    ids=["wheel", "editable checkout", "checkout", "url"],
)  # fmt: skip
def test_the_kit_names_the_install_of_an_extra_from_where_it_came(
    monkeypatch, tmp_path, direct_url, expected
):
    """Before, the train and mlflow extras' lines said `pip install 'reprokit-bench[train]'`, which no
    index serves."""
    from importlib import metadata

    from reprokit.contract import installed

    class Installed:
        def read_text(self, name: str) -> str | None:
            return json.dumps(direct_url) if name == "direct_url.json" else None

    monkeypatch.setattr(installed, "CHECKOUT", tmp_path / "site-packages")  # installed, not a checkout
    monkeypatch.setattr(metadata, "distribution", lambda name: Installed())
    assert installed.pip_install("train") == expected


def test_a_kit_that_runs_from_a_checkout_is_installed_from_that_checkout():
    from reprokit.contract import installed

    assert installed.pip_install("mlflow") == f"pip install -e '{ROOT}[mlflow]'"


@pytest.mark.slow
def test_every_install_line_of_the_readme_installs_this_kit(built, tmp_path):
    source, wheel_dir = built
    lines = readme_install_lines()
    for number, line in enumerate(lines):
        # Nothing resolves against the index or against the checkout's wheel by name: the line takes the
        # kit from where it says, the checkout (built from its files) or the wheel (this one's, built).
        assert not by_name(line), line
        words = shlex.split(line)
        requirement = [
            str(next(wheel_dir.glob(Path(word).name))) if word.endswith(".whl") else word
            for word in words[2:]
        ]
        target = tmp_path / f"venv{number}"
        # pipx installs with pip into a venv of its own: the same install, here into a fresh venv.
        python = _fresh_venv(target)
        done = subprocess.run(
            [*PIP_INTO, str(python), "install", "--quiet", "--disable-pip-version-check", "--no-deps",
             *requirement],
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
def test_a_wheel_installed_outside_the_checkout_runs_every_task(built, installed, tmp_path):
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
    # In this Python, not in the cpu image (which other tests may have built meanwhile: auto would run there).
    dry = _run(
        installed, elsewhere, "reprokit", "reproduce", "bridgetower", "--dry-run", "--accelerator", "cpu",
        "--container", "none",
    )  # fmt: skip
    # The run.sh it would run is shown; its checks then find this Python without the train extra and
    # refuse as the run would (exit 3), with the same advice (asserted below for the run).
    assert dry.returncode == 3, dry.stderr
    assert "-m reprokit_trainers.bridgetower" in dry.stdout
    assert "which lacks torch" in dry.stderr and "install the kit with its train extra" in dry.stderr
    rendered = _run(installed, elsewhere, "reprokit", "render", "volo", "--accelerator", "cuda")
    assert rendered.returncode == 0, rendered.stderr
    context = elsewhere / "rendered" / "docker" / "cuda"
    # The image's build context carries the installed trainers (read as package data, not from a checkout).
    assert (context / "Dockerfile").exists() and (context / "reprokit_trainers" / "volo").is_dir()
    assert not list(elsewhere.rglob("__pycache__"))

    # Without the train extra, the trainers cannot run in this Python: said before the first cell.
    smoke = ("reprokit", "run", "bridgetower", "--accelerator", "cpu", "--scale", "smoke", "--runtime", "local",
             "--variant", "workers0", "--container", "none", "--results", str(elsewhere / "results"))  # fmt: skip
    refused = _run(installed, elsewhere, *smoke)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    # From the wheel it was installed from: the index has no kit to give.
    (wheel,) = built[1].glob(f"{WHEEL}*.whl")
    assert (
        f"install the kit with its train extra (pip install '{wheel}[train]')"
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
                    "--runtime", "local", "--variant", "workers0", "--results", str(tmp_path / "results"))  # fmt: skip
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
    # A publication folder's trainer package, every module of it (rglob does not follow bundle/'s links).
    packages |= {
        f"reprokit/bundle/recipes/{path.relative_to(ROOT / 'recipes').as_posix()}"
        for init in (ROOT / "recipes").glob("*/*/__init__.py")
        for path in init.parent.rglob("*.py")
    }
    data = {
        f"reprokit/bundle/{inside}/{path.relative_to(ROOT / folder).as_posix()}"
        for inside, folder, patterns in (
            (
                "recipes",
                "recipes",
                (
                    "*.yaml",
                    "*.md",
                    "*/*.yaml",
                    "*/*.md",
                    "*/*/arguments.json",
                    "*/*/README.md",
                    "*/*/*/*.json",
                ),
            ),
            ("docker", "docker", ("*.j2", "partials/*.j2")),
            ("accelerators", "accelerators", ("*.md", "*/*.yaml", "*/*.txt", "*/*.py")),
            ("jobs", "scripts/jobs", ("*.j2",)),
        )
        for pattern in patterns
        for path in (ROOT / folder).glob(pattern)
    }
    assert packages and data and packages | data <= shipped, sorted((packages | data) - shipped)
    # A publication's own tests and conformance generators are the checkout's.
    assert not [
        name for name in shipped if re.match(r"reprokit/bundle/recipes/[^/]+/(tests|conformance)/", name)
    ]
    assert not [name for name in shipped if "__pycache__" in name or name.endswith(".pyc")]
