"""Rendering: Jinja2 templates (StrictUndefined) to Dockerfiles, run scripts and build contexts.

Everything rendered lands in a folder the user can read, diff and run by hand.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
from pathlib import Path

from jinja2 import ChoiceLoader, Environment, FileSystemLoader, StrictUndefined, TemplateError

from . import __version__
from .accelerators import Profile
from .cells import ROOT, Cell, shell_args
from .errors import ReprokitError

DOCKER_DIR = ROOT / "docker"
TEMPLATES_DIR = ROOT / "recipes" / "templates"
SCRIPTS_DIR = ROOT / "scripts"


def _environment() -> Environment:
    env = Environment(
        loader=ChoiceLoader([FileSystemLoader(str(DOCKER_DIR)), FileSystemLoader(str(TEMPLATES_DIR))]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["shquote"] = lambda value: shlex.quote(str(value))
    env.filters["basename"] = lambda value: os.path.basename(str(value))
    return env


def _render(template: str, **context) -> str:
    try:
        return _environment().get_template(template).render(version=__version__, **context)
    except TemplateError as exc:
        raise ReprokitError(f"template {template}: {exc}") from None


def dockerfile(profile: Profile) -> str:
    return _render("Dockerfile.j2", profile=profile)


def requirements(profile: Profile) -> str:
    header = f"# Pinned Python packages of the reprokit `{profile.name}` image (docker/accelerators.yaml).\n"
    return header + "".join(f"{line}\n" for line in profile.requirements)


def run_script(cell: Cell, profile: Profile) -> str:
    return _render("run.sh.j2", cell=cell, profile=profile, args=shell_args(cell.argv()))


def sbatch_script(template: str, **context) -> str:
    return _render(template, **context)


def write_build_context(profile: Profile, dest: Path) -> Path:
    """Dockerfile, requirements and the trainers: everything `docker build` needs, in one folder."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "Dockerfile").write_text(dockerfile(profile))
    (dest / "requirements.txt").write_text(requirements(profile))
    scripts = dest / "scripts"
    if scripts.exists():
        shutil.rmtree(scripts)
    shutil.copytree(SCRIPTS_DIR, scripts, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def context_hash(context: Path) -> str:
    """Hash of what goes into the image (Dockerfile, requirements, trainers): the image tag's suffix."""
    digest = hashlib.sha256()
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(context)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def write_run_dir_inputs(cell: Cell, profile: Profile, run_dir: Path) -> Path:
    """The host's half of the run directory: cell.json and run.sh."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "cell.json").write_text(json.dumps(cell.to_json(), indent=2, sort_keys=True) + "\n")
    script = run_dir / "run.sh"
    script.write_text(run_script(cell, profile))
    script.chmod(0o755)
    return script
