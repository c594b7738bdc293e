"""Jinja2 with StrictUndefined over the templates a package ships: a missing value is an error, never
an empty string in a Dockerfile or a job script."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, TemplateError

from reprokit import __version__
from reprokit.errors import ReprokitError


def render(folder: Path, template: str, **context) -> str:
    """Render `template` from `folder` (the kit's docker/ folder, or a module's templates)."""
    env = Environment(
        loader=FileSystemLoader(str(folder)),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["shquote"] = lambda value: shlex.quote(str(value))
    env.filters["basename"] = lambda value: os.path.basename(str(value))
    try:
        return env.get_template(template).render(version=__version__, **context)
    except TemplateError as exc:
        raise ReprokitError(f"template {template}: {exc}") from None
