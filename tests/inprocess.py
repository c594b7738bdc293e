"""The kit's command line run in the test's own process, as a user's shell would see it: its exit code,
its stdout and its stderr (what its child processes write included), from the folder and environment
given. A command run this way costs milliseconds where a new Python costs two seconds (importing the
kit); the suite keeps a subprocess test of each command's start (test_cli.py), and tests that kill,
signal or time a process run it as one.

What a command changes in the process it runs in (the folder, the environment, the umask, signal
handlers, sys.argv, the user's recipe folders, the tasks' help, the console's -q) is put back when it
returns."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import invoke
from invoke import Collection

from reprokit.cli.tasks import ns

ROOT = Path(__file__).resolve().parent.parent
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE)
# What sys.argv[0] is under `python -m invoke` and `python -m reprokit` (reprokit/contract/invocation.py reads it
# to name the command in its hints).
ARGV0 = {
    "inv": str(Path(invoke.__file__).parent / "__main__.py"),
    "reprokit": str(ROOT / "reprokit" / "__main__.py"),
}


@contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.update(env)
    time.tzset()  # TZ is read when a process starts; here, when told
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        time.tzset()


@contextmanager
def _captured() -> Iterator[dict[str, str]]:
    """stdout and stderr, Python's and the file descriptors' (child processes write to those), into files
    that are not a terminal, as a pipe is not; their text in the dict given, once the block is over."""
    found: dict[str, str] = {}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        streams = sys.stdout, sys.stderr
        for stream in streams:
            stream.flush()
        fds = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.stdout = io.TextIOWrapper(open(os.dup(1), "wb"), encoding="utf-8", write_through=True)  # noqa: SIM115
        sys.stderr = io.TextIOWrapper(open(os.dup(2), "wb"), encoding="utf-8", write_through=True)  # noqa: SIM115
        try:
            yield found
        finally:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
                stream.close()
            sys.stdout, sys.stderr = streams
            os.dup2(fds[0], 1)
            os.dup2(fds[1], 2)
            os.close(fds[0])
            os.close(fds[1])
            for name, file in (("stdout", out), ("stderr", err)):
                file.seek(0)
                found[name] = file.read().decode("utf-8", "replace")


def _tasks(collection: Collection) -> Iterator:
    yield from collection.tasks.values()
    for child in collection.collections.values():
        yield from _tasks(child)


# invoke hands each flag's help to the parser once a process (Task.arg_opts pops it from the task's help):
# the help as the kit defines it, kept from before any command ran, is given back before each.
HELP = {task: dict(task.help) for task in _tasks(ns)}


def _program(name: str):  # noqa: ANN202 -- invoke's Program or the kit's
    """A new Program, as a new process would make it (invoke/main.py's, reprokit/cli/main.py's)."""
    from reprokit import __version__
    from reprokit.cli import main

    if name == "inv":
        return invoke.Program(
            name="Invoke", binary="inv[oke]", binary_names=["invoke", "inv"], version=invoke.__version__
        )
    return main.KitProgram(name="reprokit", binary="reprokit", version=__version__, namespace=ns)


def run_command(
    *args: str, program: str = "inv", cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`inv ARGS` (``program`` "inv") or `reprokit ARGS` ("reprokit") as run_inv runs it, in this process."""
    binary = _program(program)
    argv = [ARGV0[program], *args]
    from reprokit.contract.console import console
    from reprokit.plan import recipes

    quiet = console.quiet  # -q quiets the kit's console for the rest of a process
    user_recipe_dirs = list(recipes._user_dirs)  # --recipes folders: set once a process by the command line
    for task, help_ in HELP.items():
        task.help = dict(help_)
    handlers = {s: signal.getsignal(s) for s in SIGNALS}
    umask = os.umask(0o022)
    os.umask(umask)
    here, saved_argv = os.getcwd(), sys.argv
    code: int | str | None = 0
    with _environment({**OFFLINE, **(env or {})}), _captured() as output:
        os.chdir(cwd)
        sys.argv = argv
        try:
            binary.run(argv)
        except SystemExit as stop:
            code = stop.code
            if isinstance(code, str):  # what the interpreter does with sys.exit("message")
                print(code, file=sys.stderr)
                code = 1
        except BaseException:  # noqa: BLE001 -- a traceback, as a user would see it
            traceback.print_exc()
            code = 1
        finally:
            sys.argv = saved_argv
            console.quiet = quiet
            recipes._user_dirs[:] = user_recipe_dirs
            os.chdir(here)
            os.umask(umask)
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
    return subprocess.CompletedProcess(argv, code or 0, output["stdout"], output["stderr"])
