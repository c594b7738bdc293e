"""Jinja2 with StrictUndefined over the templates a package ships: a missing value is an error, never
an empty string in a Dockerfile or a job script. Job templates (scripts/jobs/: run.sh, sbatch.sh,
bind-rank.sh) are shell files: every value in them goes through one of shell_values' filters."""

from __future__ import annotations

import os
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, TemplateError

from reprokit import __version__
from reprokit.contract.errors import ReprokitError
from reprokit.contract.layout import JOBS
from reprokit.render import shell_values


def render(folder: Path, template: str, **context) -> str:
    """Render `template` from `folder` (the kit's docker/ folder, its jobs folder, or a module's templates)."""
    shell = Path(folder).resolve() == JOBS.resolve()
    env = Environment(
        loader=FileSystemLoader(str(folder)),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
        finalize=shell_values.finalize if shell else None,
    )
    env.filters.update(shell_values.FILTERS)
    env.filters["basename"] = lambda value: os.path.basename(str(value))
    try:
        return env.get_template(template).render(version=__version__, **context)
    except TemplateError as exc:
        raise ReprokitError(f"template {template}: {exc}") from None
