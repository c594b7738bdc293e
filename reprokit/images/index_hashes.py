"""The sha256 of each wheel a base can install, read from the package index (as pip-compile
--generate-hashes reads them): PEP 691's JSON where the index speaks it, else PEP 503's links. A lock's
pins each get every such hash, so that whichever file pip picks inside the image, its hash is there."""

from __future__ import annotations

import functools
import json
import os
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from reprokit.contract.errors import ReprokitError
from reprokit.images.locks import normalize
from reprokit.images.pins import supported_tags
from reprokit.plan.accelerators import Base

DEFAULT_INDEX = "https://pypi.org/simple"
INDEX_TIMEOUT_S = 60
# A page read again after a failure that may pass (a name lookup that timed out, a reset connection, a
# 5xx), as pip retries: one such failure among a lock's ~80 pages failed a whole `inv pins`. The waits
# between the tries, in seconds.
RETRY_WAITS_S = (1.0, 3.0)


def index_url() -> str:
    """The index whose files the hashes are read from: pip's (PIP_INDEX_URL), else PyPI."""
    return (os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX).rstrip("/")


@functools.cache
def _tls() -> ssl.SSLContext:
    """The TLS settings of every index request, made once: urllib makes a context for each request
    without one, loading the system's certificates each time (a lock's 77 pages spent 1.8 CPU-s on it)."""
    return ssl.create_default_context()


def index_files(name: str, index: str) -> list[tuple[str, str]]:
    """(file name, sha256) of every file the index lists for the project `name`: PEP 691's JSON where the
    index speaks it, else the sha256 fragments of PEP 503's links."""
    url = f"{index}/{normalize(name)}/"
    if not url.startswith(("https://", "http://")):
        raise ReprokitError(f"the index {index} is not an http(s) URL: set PIP_INDEX_URL to one")
    accept = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
    for wait in (*RETRY_WAITS_S, None):
        try:
            with urllib.request.urlopen(
                urllib.request.Request(url, headers={"Accept": accept}),
                timeout=INDEX_TIMEOUT_S,
                context=_tls(),
            ) as response:
                body, kind = response.read(), response.headers.get_content_type()
            break
        except OSError as exc:
            if wait is None or not _may_pass(exc):
                raise ReprokitError(f"cannot read {url} for the hashes of {name}: {exc}") from None
            time.sleep(wait)
    if kind == "application/vnd.pypi.simple.v1+json":
        return [(f["filename"], f.get("hashes", {}).get("sha256", "")) for f in json.loads(body)["files"]]
    links = re.findall(r'href="([^"#]+)#sha256=([0-9a-f]{64})"', body.decode(errors="replace"))
    return [(urllib.parse.unquote(link.rsplit("/", 1)[-1]), digest) for link, digest in links]


def wheel_hashes(name: str, version: str, files: list[tuple[str, str]], supported: frozenset) -> list[str]:
    """The sha256 of each wheel of name==version among `files` that installs where `supported` holds."""
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
    from packaging.version import InvalidVersion, Version

    wanted = Version(version)
    # A wheel's version is its name's second field: each one read once, and only the wheels of the
    # version wanted parsed whole (a project lists thousands of files; torch's and grpcio's parsed whole
    # were most of this function's time).
    versions: dict[str, Version | None] = {}
    found = set()
    for filename, digest in files:
        if not filename.endswith(".whl") or not digest:
            continue
        text = filename.split("-")[1] if filename.count("-") >= 4 else ""
        if text not in versions:
            try:
                versions[text] = Version(text)
            except InvalidVersion:
                versions[text] = None
        if versions[text] != wanted:
            continue
        try:
            wheel_name, wheel_version, _, wheel_tags = parse_wheel_filename(filename)
        except (InvalidWheelFilename, ValueError):
            continue
        if wheel_name == canonicalize_name(name) and wheel_version == wanted and wheel_tags & supported:
            found.add(digest)
    return sorted(found)


def _may_pass(error: OSError) -> bool:
    """A failure that a second try may not meet: anything but the index's own answer of 4xx (no such
    project, no access), which would be the same again."""
    return not (isinstance(error, urllib.error.HTTPError) and 400 <= error.code < 500)


def locked_hashes(install: dict[str, str], base: Base, index: str | None = None) -> dict[str, list[str]]:
    """For each pin, the sha256 of every wheel of its version the base's Python and platform can install,
    from the index: whichever of them pip picks inside the image, its hash is in the lock."""
    index = index or index_url()
    supported = supported_tags(base.python, base.glibc)
    names = sorted(install)
    with ThreadPoolExecutor(max_workers=8) as pool:
        listings = dict(zip(names, pool.map(lambda n: index_files(n, index), names), strict=True))
    found = {n: wheel_hashes(n, install[n], listings[n], supported) for n in names}
    missing = [f"{n}=={install[n]}" for n in names if not found[n]]
    if missing:
        raise ReprokitError(
            f"{index} lists no wheel for Python {base.python} on glibc {base.glibc} (x86-64) of "
            f"{', '.join(missing)}: the lock could not hash what the image would install"
        )
    return found
