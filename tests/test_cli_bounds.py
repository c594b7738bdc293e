"""Flags a user can get wrong, said in one line: a timeout or a repeat count beyond any sensible run,
a tracking URI no MLflow store speaks, a store that cannot be reached or an export without the kit's
mlflow extra; and output cut short by `| head` ends quietly."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading

import pytest
from invoke import Context, Exit

from reprokit.cli import result_tasks, tasks
from tests.conftest import INV, ROOT
from tests.fakes.sessions import write_session


@pytest.mark.parametrize(
    "flags, expected",
    [
        ({"timeout": "315360000"}, "--timeout 315360000: at most 2,592,000 seconds (longer than any published run: "
         "a cell still running after 30 days is stuck)"),
        ({"timeout": "inf"}, "--timeout inf: at most 2,592,000 seconds (longer than any published run: a cell "
         "still running after 30 days is stuck)"),
        ({"timeout": "1e400"}, "--timeout 1e400: at most 2,592,000 seconds (longer than any published run: a cell "
         "still running after 30 days is stuck)"),
        ({"timeout": "nan"}, "--timeout nan: give a number of seconds above 0"),
        ({"repeat": "10000"}, "--repeat 10000: at most 100 (the median of more runs says nothing new, and each run "
         "is the whole cell again)"),
        ({"repeat": "1e20"}, "--repeat 1e20: give how many times to run each cell (a whole number, 1 or more)"),
    ],
)  # fmt: skip
def test_a_timeout_or_repeat_beyond_any_run_is_one_line_with_its_reason(flags, expected):
    with pytest.raises(Exit) as refused:
        tasks.reproduce(Context(), "all", dry_run=True, **flags)
    assert refused.value.message == f"reprokit: {expected}" and refused.value.code == 2


@pytest.mark.parametrize(
    "uri, why",
    [
        ("file:///tmp/mlruns", "MLflow 3 refuses its file store"),
        ("/tmp/mlruns", "MLflow 3 refuses its file store"),
        ("bogus://x", "no MLflow store speaks 'bogus'"),
        ("sqlite://relative.db", None),
    ],
)
def test_a_tracking_uri_no_store_speaks_is_one_line_naming_the_stores_that_work(tmp_path, uri, why):
    pytest.importorskip("mlflow")
    write_session(tmp_path / "results" / "s", "2025-01-01T10:00:00+00:00")
    with pytest.raises(Exit) as refused:  # before: MLflow's own exception, with its traceback
        result_tasks.export_results(Context(), "s", tracking_uri=uri, results=str(tmp_path / "results"))
    if why is None:
        assert (
            refused.value.message
            == f"reprokit: --tracking-uri {uri}: a SQLite store is sqlite:///path/to/mlflow.db"
        )
    else:
        assert refused.value.message == (
            f"reprokit: --tracking-uri {uri}: {why}; give sqlite:///path/to/mlflow.db, or an MLflow server "
            "(http://host:5000)"
        )


@pytest.mark.parametrize("program", [INV, [sys.executable, "-m", "reprokit"]])
@pytest.mark.parametrize("words", [["reproduce", "--help"], ["recipes"]])
def test_output_cut_short_by_head_ends_without_a_traceback(program, words):
    # The reader is gone before the first line is written: every write of the help meets a closed pipe.
    proc = subprocess.Popen([*program, *words], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


@pytest.fixture
def one_session(tmp_path, monkeypatch):
    """A session to export, and MLflow's own waits on a server cut short: a test of the old code fails
    in seconds rather than MLflow's minutes of retries."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    for proxy in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(proxy, raising=False)
    write_session(tmp_path / "results" / "s", "2025-01-01T10:00:00+00:00")
    return tmp_path / "results"


@pytest.mark.parametrize("hidden", ["mlflow", "sqlalchemy"])
def test_an_export_without_the_mlflow_extra_is_one_line_saying_how_to_install_it(
    one_session, monkeypatch, hidden
):
    # As in `make reproduce`'s environment, which installs the kit without the extra: the package and
    # every module of it this process has loaded cannot be imported. MLflow is imported whole first: first
    # imported with sqlalchemy hidden, it registers no SQL store for the rest of this process (the next
    # export on this worker was refused `unsupported URI 'sqlite:...'`).
    from reprokit.report import mlflow_store

    for module in (*mlflow_store.CLIENT_MODULES, *mlflow_store.DATABASE_MODULES, "mlflow.store.db.utils"):
        pytest.importorskip(module)
    for module in [name for name in sys.modules if name.split(".")[0] == hidden] or [hidden]:
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(Exit) as refused:  # before: ModuleNotFoundError, with its traceback
        result_tasks.export_results(Context(), "s", results=str(one_session))
    assert refused.value.message == (
        f"reprokit: exporting to MLflow needs the kit's mlflow extra ({hidden} is not installed here): "
        f"pip install -e '{ROOT}[mlflow]'"  # from the checkout this kit runs from: the index has no kit
    )
    assert refused.value.code == 2 and not (one_session / "mlflow.db").exists()


def _closed_port() -> int:
    """A local port nothing listens on: connecting to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_export_to_a_server_that_refuses_is_one_line_naming_it(one_session):
    pytest.importorskip("mlflow")
    uri = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(Exit) as refused:  # before: 253 s of MLflow's retries, then five chained tracebacks
        result_tasks.export_results(Context(), "s", tracking_uri=uri, results=str(one_session))
    assert refused.value.message == (
        f"reprokit: --tracking-uri {uri}: the MLflow store cannot be reached (Connection refused); "
        "start it, or give another store"
    )


def test_an_export_to_a_server_that_never_answers_stops_at_its_time_limit_in_one_line(
    one_session, monkeypatch
):
    pytest.importorskip("mlflow")
    from reprokit.report import mlflow_store

    monkeypatch.setattr(mlflow_store, "REACH_TIMEOUT_S", 0.5)
    with socket.socket() as silent:  # the kernel accepts the connection; nothing ever reads or answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(Exit) as refused:
            result_tasks.export_results(Context(), "s", tracking_uri=uri, results=str(one_session))
    assert refused.value.message == (
        f"reprokit: --tracking-uri {uri}: the MLflow store cannot be reached (no answer within 0.5 s); "
        "start it, or give another store"
    )


class _HealthyButRefusing(http.server.BaseHTTPRequestHandler):
    """A server whose /health answers and whose API refuses every call (a broken deployment)."""

    def do_GET(self):  # noqa: N802 -- http.server's name
        self.send_response(200 if self.path == "/health" else 500)
        self.end_headers()
        self.wfile.write(b"OK" if self.path == "/health" else b"internal error")

    do_POST = do_GET

    def log_message(self, *args):
        pass


def test_an_export_the_store_refuses_midway_is_one_line_naming_the_store(one_session):
    pytest.importorskip("mlflow")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HealthyButRefusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(Exit) as refused:  # before: MLflow's exception, with its traceback
            result_tasks.export_results(Context(), "s", tracking_uri=uri, results=str(one_session))
    finally:
        server.shutdown()
        server.server_close()
    said = refused.value.message
    assert said.startswith(f"reprokit: the MLflow store {uri} refused the export: ") and "\n" not in said
