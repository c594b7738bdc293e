"""Where this kit was installed from, for the one line that tells a user how to add an extra to it.

The kit is not on the package index (the index's `reprokit` is another project): `pip install
'reprokit-bench[train]'` finds nothing. What pip recorded when it installed the kit (PEP 610's
direct_url.json: the checkout, editable or not, or the wheel file) says where the same kit comes from
again; a kit that runs from a checkout comes from that checkout.
"""

from __future__ import annotations

import json
import shlex
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlsplit

from reprokit import DISTRIBUTION

CHECKOUT = Path(__file__).resolve().parents[2]


def pip_install(extra: str) -> str:
    """The pip command that installs this kit with `extra`, from where this one came: the checkout it
    runs from (editable, as `make reproduce` installs it), else the wheel or URL pip recorded."""
    if (CHECKOUT / "pyproject.toml").is_file():
        return f"pip install -e {shlex.quote(f'{CHECKOUT}[{extra}]')}"
    found = _direct_url()
    if found is None:
        # Installed by name from an index of the user's own: the same name gives the same kit there.
        return f"pip install {shlex.quote(f'{DISTRIBUTION}[{extra}]')}"
    url = str(found.get("url", ""))
    parts = urlsplit(url)
    if parts.scheme != "file":  # a URL pip installed it from: a direct reference to the same
        return f"pip install {shlex.quote(f'{DISTRIBUTION}[{extra}] @ {url}')}"
    editable = "-e " if (found.get("dir_info") or {}).get("editable") else ""
    return f"pip install {editable}{shlex.quote(f'{unquote(parts.path)}[{extra}]')}"


def _direct_url() -> dict | None:
    """pip's record of where the installed kit came from; None for a kit installed by name, or none."""
    try:
        text = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    try:
        found = json.loads(text) if text else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None
