"""The READMEs are executable truth: every `inv`, `reprokit` and `make` command the project's pages
show still parses and runs (with --dry-run where it would start work, --help where it needs a
session or hours), and no page, comment or help names one workplace's tooling instead of what a user
on any machine does."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

# Tasks that take --dry-run, run as they are (fast), or are only parsed (--help).
DRY = {"run", "reproduce", "build", "export"}
REAL = {"recipes", "show", "render"}
FENCE = re.compile(r"```(?:bash|sh|console)\n(.*?)```", re.S)


PAGES = [
    "README.md", "ARCHITECTURE.md", "CONTRIBUTING.md", "recipes/README.md", "docker/README.md",
    "scripts/README.md", "benchmarks/README.md", "reprokit/run/README.md", "reprokit/report/README.md",
]  # fmt: skip


def commands() -> list[str]:
    found = []
    for block in (b for page in PAGES for b in FENCE.findall((ROOT / page).read_text())):
        joined = re.sub(r"\\\n\s*", " ", block)
        for full in joined.splitlines():
            for line in re.sub(r"\s+#\s.*$", "", full).split("&&"):
                line = line.strip()
                if line.startswith(("inv ", "reprokit ", "make ", "python -m reprokit")):
                    found.append(line)
    return found


def _argv(line: str) -> list[str] | None:
    words = shlex.split(line)
    if words[0] == "make":
        return ["make", "-n", "-C", str(ROOT), *words[1:]]
    # inv X / reprokit X / python -m reprokit X
    words = words[1:] if words[0] in ("inv", "reprokit") else words[3:]
    task = next((w for w in words if not w.startswith("-")), None)
    if "--help" in words or "--list" in words or "--version" in words or task is None:
        extra = []
    elif "<" in line:  # a placeholder (<session>, <path>): the command can only be parsed
        extra = ["--help"]
    elif task in DRY:
        extra = [] if "--dry-run" in words else ["--dry-run"]
    elif task in REAL:
        extra = []
    else:
        extra = ["--help"]
    return [sys.executable, "-m", "invoke", "--search-root", str(ROOT), *words, *extra]


def test_the_readme_shows_commands():
    assert len(commands()) >= 15


@pytest.mark.parametrize("line", commands())
def test_every_readme_command_still_runs(line, tmp_path):
    argv = _argv(line)
    # The pages' Slurm examples are of a user's cluster, whose partition (batch) a dry run asks sinfo about.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "sinfo").write_text("#!/bin/sh\necho 'batch*|up|8'\n")
    (tmp_path / "bin" / "sinfo").chmod(0o755)
    env = {"HF_HUB_OFFLINE": "1", "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin:" + str(ROOT / ".venv" / "bin")}
    import os

    result = subprocess.run(
        argv, cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ, **env}
    )
    last = (result.stderr.strip().splitlines() or [""])[-1]
    # A dry run of a plan made whole whose quick checks refuse this machine (the Slurm examples' images are
    # exported on the user's cluster, not here) exits 3, its last line saying why: the command runs.
    refused = result.returncode == 3 and "--dry-run" in argv and last.startswith("reprokit: dry run: ")
    assert result.returncode == 0 or refused, f"{line}\n  ran: {shlex.join(argv)}\n  {last}"


# Words of one particular machine's tooling (a tool that ran a command for the user and named its output
# folder in a variable), once said where the kit's own pages and code should say what a user on any bare
# GPU node does: a folder of their choice, the bundle copied over, the command.
TOOLING = [
    r"device machine",
    r"\brun\b` tool",
    r"\brun tool\b",
    r"\$OUT\b",
    r"\blent\b",
    r"carried path",
    r"\btimeout_s: ",
]
TEXT = (".md", ".py", ".yaml", ".yml", ".sh", ".j2", ".toml", ".txt", ".json", "Makefile")


def _tracked_text() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    names = [name for name in listed.decode().split("\0") if name.endswith(TEXT)]
    return [ROOT / name for name in names if name != "tests/test_readme.py" and (ROOT / name).is_file()]


def test_no_page_comment_or_help_names_a_workplaces_tooling():
    found = []
    pattern = re.compile("|".join(TOOLING), re.IGNORECASE)
    for path in _tracked_text():
        for number, text in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if pattern.search(text):
                found.append(f"{path.relative_to(ROOT)}:{number}: {text.strip()[:120]}")
    assert found == []


def test_the_readme_lists_every_status_a_cell_can_have_with_its_meaning():
    """Before, results.csv said `not started` (and `incomplete`) where README.md listed only `failed`,
    `timeout`, `interrupted`, `skipped`: a user could not tell a cell never reached from one skipped."""
    from reprokit.contract import records

    (row,) = [
        text for text in (ROOT / "README.md").read_text().splitlines() if text.startswith("| `no result` |")
    ]
    # summary.json's statuses (the trainers' and the kit's), then a row's own where no summary says one.
    statuses = [s for s in records.CONTRACT["statuses"] if s != "ok"] + [
        "not started",
        "incomplete",
        "unreadable",
    ]
    for status in statuses:
        # Each named, with what it means beside it (in brackets after the word).
        assert re.search(rf"`{status}` \(\w", row), status
    assert set(records.ROW_STATUSES) <= set(statuses)
