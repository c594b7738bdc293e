"""The MLflow store an export writes to: which stores work (by the tracking URI's scheme), the results
folder's own SQLite file by default, the `mlflow` extra's modules that a store needs, whether its
server answers before an export starts, and the lock file through which exports to one store take
turns."""

from __future__ import annotations

import hashlib
import http.client
import importlib
import os
import socket
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from reprokit.contract import installed
from reprokit.contract.errors import ReprokitError
from reprokit.contract.textsafe import line
from reprokit.run import machinelock

# The stores MLflow 3 serves, by the tracking URI's scheme (its file store, `file://` or a folder, is refused).
SCHEMES = ("sqlite", "http", "https", "databricks", "postgresql", "mysql", "mssql")
STORES = "sqlite:///path/to/mlflow.db, or an MLflow server (http://host:5000)"
# What the `mlflow` extra installs that an export imports: MLflow's client, and for a SQLite or SQL
# store its database layer (a server needs only the client).
CLIENT_MODULES = ("mlflow.tracking",)
DATABASE_MODULES = ("sqlalchemy", "alembic")
SERVERS = ("http", "https", "databricks")
# How long a store's server has to answer before the export starts, in seconds: one that answers takes
# milliseconds; one that never does held an export 253 s in MLflow's own retries, then five tracebacks.
REACH_TIMEOUT_S = 5.0
# The SQL stores' default ports (a URI that names no port).
SQL_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}


def default_uri(results: Path) -> tuple[str, str]:
    """(tracking URI, artifact location) of the local store of a results folder."""
    results = results.resolve()
    return f"sqlite:///{results / 'mlflow.db'}", (results / "mlartifacts").as_uri()


def artifact_location(tracking_uri: str) -> str | None:
    """Where a new experiment keeps its artifacts: beside a SQLite store's file; a server or a file
    store decides for itself (None)."""
    prefix = "sqlite:///"
    if not tracking_uri.startswith(prefix):
        return None
    database = Path(tracking_uri[len(prefix) :])
    return (database.resolve().parent / "mlartifacts").as_uri()


def check_uri(tracking_uri: str) -> str:
    """A tracking URI the export can use, or one line naming the stores that work."""
    scheme = scheme_of(tracking_uri)
    # MLflow's own opt-in to its file store, which the user may have set.
    opted_in = os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() == "true" and scheme in ("", "file")
    if scheme not in SCHEMES and not opted_in:
        why = (
            "MLflow 3 refuses its file store"
            if scheme in ("", "file")
            else f"no MLflow store speaks {scheme!r}"
        )
        raise ReprokitError(f"--tracking-uri {line(tracking_uri)}: {why}; give {STORES}")
    if scheme == "sqlite" and not tracking_uri.startswith("sqlite:///"):
        raise ReprokitError(
            f"--tracking-uri {line(tracking_uri)}: a SQLite store is sqlite:///path/to/mlflow.db"
        )
    return tracking_uri


def scheme_of(tracking_uri: str) -> str:
    return urlsplit(tracking_uri).scheme.split("+")[0].lower()


def check_extra(tracking_uri: str | None) -> None:
    """The modules an export to this store (None: the results folder's SQLite file) imports, there: else
    one line saying how to install them (`make reproduce` installs the kit without its `mlflow` extra)."""
    server = tracking_uri is not None and scheme_of(tracking_uri) in SERVERS
    wanted = CLIENT_MODULES + (() if server else DATABASE_MODULES)
    missing = []
    for module in wanted:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module.split(".")[0])
    if missing:
        raise ReprokitError(
            f"exporting to MLflow needs the kit's mlflow extra ({', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not installed here): "
            f"{installed.pip_install('mlflow')}"
        )


def check_server(tracking_uri: str) -> None:
    """A store behind a server answers within REACH_TIMEOUT_S seconds, else one line naming the URI and
    what went wrong: an MLflow server is asked for its /health (any HTTP answer will do: a 401 is a server
    there), a SQL store's host is connected to. A SQLite file has no server; Databricks' host is in
    its profile."""
    scheme, parts, timeout_s = scheme_of(tracking_uri), urlsplit(tracking_uri), REACH_TIMEOUT_S
    try:
        if scheme in ("http", "https"):
            health = f"{tracking_uri.rstrip('/')}/health"
            try:
                with urllib.request.urlopen(health, timeout=timeout_s):  # noqa: S310 -- the user's own server
                    pass
            except urllib.error.HTTPError:
                pass  # it answered
        elif scheme in SQL_PORTS and parts.hostname:
            socket.create_connection(
                (parts.hostname, parts.port or SQL_PORTS[scheme]), timeout=timeout_s
            ).close()
    except (OSError, http.client.HTTPException, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        if isinstance(reason, TimeoutError | socket.timeout):
            why = f"no answer within {timeout_s:g} s"
        else:
            why = str(getattr(reason, "strerror", None) or reason) or type(reason).__name__
        raise ReprokitError(
            f"--tracking-uri {line(tracking_uri)}: the MLflow store cannot be reached ({line(why)}); "
            "start it, or give another store"
        ) from None


def lock_file(tracking_uri: str) -> Path:
    """Where exports to this store take turns: beside a SQLite file (every machine that writes it sees the
    lock), else in this machine's lock folder, by the URI. Keyed by the store, not by how it was named:
    beside the SQLite file itself (its real path: through a link to it or to its folder, the same lock),
    a server by its URI with the case and trailing slash that do not change it left out."""
    if tracking_uri.startswith("sqlite:///"):
        given = Path(tracking_uri[len("sqlite:///") :])
        database = Path(os.path.realpath(given))
        if not database.parent.is_dir():
            raise ReprokitError(f"--tracking-uri {line(tracking_uri)}: no folder {line(given.parent)}")
        return database.parent / f".{database.name}.lock"
    parts = urlsplit(tracking_uri)
    server = f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path.rstrip('/')}"
    folder = machinelock.lock_dir()
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"reprokit-mlflow-{hashlib.sha256(server.encode()).hexdigest()[:16]}.lock"


def store_of(session_dir: Path, tracking_uri: str | None) -> tuple[str, str | None]:
    """(tracking URI, artifact location) of the store a session is exported to: the one given, else
    the results folder's own, which must be writable."""
    if tracking_uri:
        return check_uri(tracking_uri), artifact_location(tracking_uri)
    # The results folder the session was found in (the session is inside it: session.find), never the
    # folder a link would lead to.
    results = session_dir.parent.resolve()
    if not os.access(results, os.W_OK):
        raise ReprokitError(
            f"the results folder {results} cannot be written, and the default MLflow store lives there "
            "(mlflow.db): give --tracking-uri (sqlite:///elsewhere/mlflow.db, or a server)"
        )
    return default_uri(results)
