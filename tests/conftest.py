"""Shared test helpers: run the kit's CLI as a user would, and write throwaway recipes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from reprokit.judge.verdicts import DISTURBANCES
from tests.inprocess import ROOT, run_command

INV = [sys.executable, "-m", "invoke"]

# One OpenMP thread per torch, here and in every trainer the suite starts (unless the caller chose): the
# suite runs a worker more than the cores, each starting trainers, and torch's default of a thread per
# core had them spin against each other (the conformance and VOLO files: 127 -> 105 CPU-s on 2 cores,
# their golden values unchanged). Set before any test module imports torch.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# A suite started in the background (`make test &`, nohup, a script's job) inherits SIGINT ignored, and
# every process it starts with it: the kits the tests Ctrl-C would never see the signal (three tests
# timed out that way, and the trainer one left alive held the machine lock). Ctrl-C is restored here,
# so the kits start with Python's own handler, as from a terminal.
if (
    signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    and threading.current_thread() is threading.main_thread()
):
    signal.signal(signal.SIGINT, signal.default_int_handler)


def run_inv(
    *args: str, cwd: Path = ROOT, timeout: float | None = None, env: dict | None = None, process: bool = False
) -> subprocess.CompletedProcess:
    """`inv ARGS` as a user's shell runs it: its exit code, stdout and stderr. In this process
    (tests/inprocess.py: a new Python costs seconds, most of a small check's time), or as a new process
    with ``process`` or a ``timeout`` (a command that builds, trains or waits on a cluster: only a process
    can be stopped at a limit, and one that hangs fails its test rather than the suite)."""
    if not process and timeout is None:
        return run_command(*args, cwd=cwd, env=env)
    return subprocess.run(
        [*INV, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout or 600,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **(env or {})},
    )


# What a training run records of the machine it ran on rather than of what it trained: the load watcher's
# departure and a stall (each tested on its own, in test_machineload.py and test_stalls.py). On a shared
# machine (CI beside other work) any run may record them; a test of what a run trained on asserts the rest.
# The host knows them by the same words (compare does not judge such a run unless asked).
MACHINE_DEPARTURES = DISTURBANCES


def departures_of_the_run(summary: dict) -> list[dict]:
    """A summary's departures less those a busy machine makes."""
    return [d for d in summary["departures"] if not d["reason"].startswith(MACHINE_DEPARTURES)]


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (make test), the tests of one service in one file run in turn on one worker:
    they share the images, tags and containers they make (and the session's cpu image fixture), and the
    two-node Slurm cluster's jobs would wait for each other's nodes. Files that build different images
    (test_docker's cpu image, test_standins' vendor stand-ins) may build at the same time, as two users'
    sessions do. Every worker collects the same order."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        service = next((s for s in ("docker", "slurm") if item.get_closest_marker(s)), None)
        if item.get_closest_marker("xdist_group"):
            continue  # a test's own, finer group (one per stand-in base: tests/test_standins.py)
        if service:
            item.add_marker(pytest.mark.xdist_group(f"{service}-{item.path.stem}"))
        elif _shares_a_module_fixture(item):
            # A fixture made once per module (a session trained, a wheel built, a venv made) is made once
            # per worker that runs a test of the module: its tests go to one worker, or it is made twice.
            item.add_marker(pytest.mark.xdist_group(f"module-{item.path.stem}"))
    # The longest work first (a service's tests, one after another, then the tests that train), so that
    # no worker is left with a long group while the other has nothing to do.
    items.sort(
        key=lambda item: (
            0 if item.get_closest_marker("xdist_group") else 1 if item.get_closest_marker("slow") else 2
        )
    )


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a module- or session-scoped fixture of its own file."""
    module = item.nodeid.split("::")[0]
    info = getattr(item, "_fixtureinfo", None)
    for definitions in info.name2fixturedefs.values() if info else ():
        for definition in definitions:
            if definition.scope in ("module", "session") and definition.baseid == module:
                return True
    return False


@pytest.fixture(autouse=True)
def _recipe_folders_of_this_test_only():
    """The user's recipe folders (--recipes) are set once a process by the command line: a test that
    calls a task with its own folder in this process leaves it to the next test on the same worker (a
    recipe of its, met by another test's `all`), unless it is put back."""
    from reprokit.plan import recipes

    saved = list(recipes._user_dirs)
    yield
    recipes._user_dirs[:] = saved


@pytest.fixture(autouse=True, scope="session")
def _machine_lock_of_this_test_run(tmp_path_factory):
    """The kit's machine lock (reprokit/run/machinelock.py) in this test run's own folder: the suite's
    sessions take turns among themselves, and wait for no one else's benchmark on this machine."""
    os.environ["REPROKIT_LOCK_DIR"] = str(tmp_path_factory.mktemp("machine-lock"))
    # Trainers run by the suite share a developer's machine: whether it was shared is tested on its own
    # (test_machineload.py), not in every test that reads a summary's departures.
    os.environ["REPROKIT_WATCH_LOAD"] = "0"
    # A worker that tokenized in this process (test_trainer_bridgetower's tokenizer) and then starts a
    # process (the kit's cells) would hear tokenizers' warning about the fork on its stderr, in the output
    # of whichever command runs in the worker next.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"


@pytest.fixture
def inv():
    return run_inv


@pytest.fixture
def recipe_file(tmp_path):
    """Write a recipe YAML built from the bridgetower recipe with some keys changed, named after its
    file (a user's recipe never takes a kit recipe's name)."""
    import yaml

    def make(changes: dict | None = None, drop: tuple[str, ...] = (), raw: str | None = None) -> Path:
        path = tmp_path / "my-recipe.yaml"
        if raw is not None:
            path.write_text(raw)
            return path
        from tests.fakes import bridgetower_recipe

        data = bridgetower_recipe()
        data["name"] = path.stem
        for key in drop:
            data.pop(key)
        if "variants" in (changes or {}):  # the GPU bench's list names the real recipe's variants
            data["node"].pop("bench", None)
        data.update(changes or {})
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return make
