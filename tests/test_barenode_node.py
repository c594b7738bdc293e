"""The bare node, rehearsed on this machine: the bundle made by its one command (from PyPI, for this
Python), then the node command run in a venv holding only the node's packages (tests/nodevenv.py),
with the network cut (a network namespace of its own, loopback only), on the CPU.

Slice (a) runs to its end there: the bundle installs into its prefix, the trainers import with its
transformers 4.49 ahead of the node's 5.17, and every step that needs CUDA says so in one line. A
slice of smoke cells on the CPU stands in for the cells that would train on the GPU, to kill the run
in the middle of it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reprokit.barenode import node_checks, slices, wheels
from tests import nodevenv

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
NODE_COMMAND = ROOT / "scripts" / "barenode" / "run.py"
HERE = f"{sys.version_info.major}.{sys.version_info.minor}"
IN_CI = os.environ.get("CI") == "true"
SMOKE_SLICES = """
measured_steps: 2
slices:
  smoke:
    title: three smoke rungs of the ViT ladder on the CPU
    scale: smoke
    cells:
      - {recipe: vit-speedups, variant: baseline, seconds: 20}
      - {recipe: vit-speedups, variant: amp, seconds: 20}
      - {recipe: vit-speedups, variant: multi-tensor, seconds: 20}
"""


def _unavailable(why: str) -> None:
    if IN_CI:
        pytest.fail(why)
    pytest.skip(why)


def offline(argv: list[str]) -> list[str]:
    """`argv` in a network namespace of its own: no route anywhere, loopback up (as on a node)."""
    return ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *argv]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "node-bundle"
    done = subprocess.run(
        [sys.executable, "-m", "reprokit.barenode", "bundle", str(out), "--python-version", HERE],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    if done.returncode != 0 and "resolve" in done.stderr:
        _unavailable(f"the bundle needs PyPI: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith(f"Bundle: {out} (")
    return out


@pytest.fixture(scope="module")
def node_python(tmp_path_factory) -> Path:
    if subprocess.run(offline(["true"]), capture_output=True).returncode != 0:
        _unavailable("cutting the network needs unshare --net (root, or user namespaces)")
    return nodevenv.make(tmp_path_factory.mktemp("node") / "venv")


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """One scratch folder for the module's node runs, as a node keeps its own between commands: the
    bundle installed there once (a later command finds it in place) and the bytecode its Python writes
    for the prefix and the kit (about 2 CPU-s a process compiled it again)."""
    return tmp_path_factory.mktemp("node-scratch")


def node_command(python: Path, bundle: Path, tmp: Path, scratch: Path, *args: str) -> list[str]:
    return offline(
        [str(python), str(NODE_COMMAND), *args, "--bundle", str(bundle), "--out", str(tmp / "out"),
         "--scratch", str(scratch)]
    )  # fmt: skip


def env(tmp: Path) -> dict[str, str]:
    lock = tmp / "lock"
    lock.mkdir(exist_ok=True)
    # The node's Python alone: nothing of this test's environment on its path, and its bytecode written
    # as a node writes it (this machine's PYTHONDONTWRITEBYTECODE had every process compile it again).
    left = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")
    return {k: v for k, v in os.environ.items() if k not in left} | {"REPROKIT_LOCK_DIR": str(lock)}


def rows(out: Path) -> list[dict]:
    path = out / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_bundle_is_one_command_under_64_mib_and_its_hashes_verify(bundle):
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert wheels.bundle_bytes(bundle) < wheels.LIMIT_BYTES
    carried = {w["name"].lower(): w for w in manifest["wheels"]}
    assert carried["transformers"]["version"] == "4.49.0"
    assert "the kit's pin wins over the node's 5.17.0" in carried["transformers"]["why"]
    assert carried["tokenizers"]["version"].startswith("0.21")  # what 4.49 accepts, not the node's 0.23
    assert {"pydantic", "invoke", "datasets", "simplejpeg"} <= set(carried)  # the node lacks them
    assert not {"torch", "torchvision", "docker", "numpy"} & set(carried)  # the node's, or not needed
    done = subprocess.run(
        [sys.executable, "-m", "reprokit.barenode", "verify", str(bundle)], capture_output=True, text=True
    )
    assert done.returncode == 0 and "every wheel matches" in done.stdout


def test_a_damaged_wheel_is_named_and_nothing_is_installed(bundle, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(bundle, copy)
    damaged = sorted((copy / "wheels").glob("invoke-*.whl"))[0]
    damaged.write_bytes(damaged.read_bytes()[:-100])
    done = subprocess.run(
        [sys.executable, "-m", "reprokit.barenode", "verify", str(copy)], capture_output=True, text=True
    )
    assert done.returncode == 1 and f"{damaged}: its sha256 is not the manifest's" in done.stderr
    run = subprocess.run(
        [sys.executable, str(NODE_COMMAND), "a", "--bundle", str(copy), "--out", str(tmp_path / "out"),
         "--scratch", str(tmp_path / "scratch")],
        capture_output=True, text=True, env=env(tmp_path),
    )  # fmt: skip
    assert run.returncode == 2
    assert (
        run.stdout.strip()
        .splitlines()[-1]
        .endswith(f"{damaged}: its sha256 is not the manifest's (a damaged copy?)")
    )
    assert not (tmp_path / "scratch" / "prefix").exists()


def test_slice_a_runs_to_its_end_with_no_network_in_the_nodes_python(bundle, node_python, scratch, tmp_path):
    shutil.rmtree(scratch / "prefix", ignore_errors=True)  # the install is this test's to see
    done = subprocess.run(
        node_command(node_python, bundle, tmp_path, scratch, "a", "--budget-s", "400"),
        capture_output=True, text=True, env=env(tmp_path), timeout=600,
    )  # fmt: skip
    log = (tmp_path / "out" / "runner.log").read_text()
    assert done.returncode == 1, log  # no cell can train without CUDA
    assert "wheels (" in log and "installed in" in log
    # Every step that needs CUDA says so in one line; the slice still runs to its end.
    for item in ("device", "matmul", "energy"):
        assert f"devicecheck: {item}: needs CUDA" in log
    found = rows(tmp_path / "out")
    assert [r["variant"] for r in found] == [planned.cell.variant for planned in slices.plan("a")]
    for row in found:
        assert row["status"] == "failed"
        assert "this cell was planned for cuda and this process sees no CUDA device" in row["error"]
    # The trainers imported with the bundle's packages ahead of the node's; the node's torch is what runs.
    checks = json.loads((tmp_path / "out" / "checks.json").read_text())
    packages = checks["software"]["packages"]
    # Those of the kit's trainers the slice's cells run, as the package lays them out.
    assert checks["software"]["trainers_imported"] == node_checks.kit_trainers_of(slices.plan("a"))
    assert packages["transformers"]["version"] == "4.49.0" and packages["transformers"]["from"] == "bundle"
    assert packages["torch"]["from"] == "node"
    assert "nvidia-smi is not on PATH" in checks["devices"]["error"]
    # The node's own Python was never written to.
    ours = subprocess.run([str(node_python), "-c", "import transformers; print(transformers.__version__)"],
                          capture_output=True, text=True)  # fmt: skip
    assert ours.stdout.strip() == "5.17.0"
    listed = subprocess.run(
        ["tar", "tzf", str(tmp_path / "out" / "node-a.tar.gz")], capture_output=True, text=True
    ).stdout
    assert "session/runs/volo--pretrain-d5/summary.json" in listed and "checks.json" in listed
    assert len(list((tmp_path / "out").iterdir())) <= 8


def _start_smoke(node_python: Path, bundle: Path, tmp: Path, scratch: Path) -> subprocess.Popen:
    spec = tmp / "slices.yaml"
    spec.write_text(SMOKE_SLICES)
    command = node_command(
        node_python,
        bundle,
        tmp,
        scratch,
        "smoke",
        "--slices-file",
        str(spec),
        "--accelerator",
        "cpu",
        "--budget-s",
        "400",
    )
    return subprocess.Popen(
        command, env=env(tmp), start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _first_row(process: subprocess.Popen, out: Path) -> None:
    deadline = time.monotonic() + 400
    while not rows(out) and time.monotonic() < deadline:
        assert process.poll() is None, (out / "runner.log").read_text()
        time.sleep(0.2)
    assert rows(out), "no cell ended in time"


def _sessions(scratch: Path) -> set[Path]:
    return set((scratch / "results").glob("*"))


def test_a_run_killed_mid_slice_returns_its_finished_rows(bundle, node_python, scratch, tmp_path):
    before = _sessions(scratch)
    process = _start_smoke(node_python, bundle, tmp_path, scratch)
    try:
        _first_row(process, tmp_path / "out")
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the node's time limit, at its worst: no chance to tidy up
        process.wait()
        # The trainer of the cell that was running, in a session of its own, goes too.
        ours = _sessions(scratch) - before
        for record in (r for s in ours for r in s.glob("runs/*/supervisor.json")):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(json.loads(record.read_text())["pgid"], signal.SIGKILL)
    out = tmp_path / "out"
    finished = [r for r in rows(out) if r["status"] == "ok"]
    assert finished and finished[0]["variant"] == "baseline"
    assert "baseline" in (out / "results.csv").read_text()
    listed = subprocess.run(
        ["tar", "tzf", str(out / "node-smoke.tar.gz")], capture_output=True, text=True
    ).stdout
    for row in finished:
        assert f"session/runs/vit-speedups--{row['variant']}/throughput.csv" in listed


def test_a_run_stopped_by_its_time_limit_records_the_running_cell_and_what_never_started(
    bundle, node_python, scratch, tmp_path
):
    process = _start_smoke(node_python, bundle, tmp_path, scratch)
    _first_row(process, tmp_path / "out")
    os.killpg(process.pid, signal.SIGTERM)  # what `timeout` sends first
    assert process.wait(timeout=120) == 1
    statuses = {r["variant"]: (r["status"], r["error"]) for r in rows(tmp_path / "out")}
    assert statuses["baseline"][0] == "ok"
    assert len(statuses) == 3
    assert {s for s, _ in statuses.values()} <= {"ok", "interrupted", "skipped"}
    assert any(e == "not started: the run was stopped" for _, e in statuses.values()) or all(
        s != "skipped" for s, _ in statuses.values()
    )
    assert "stopped (signal 15)" in (tmp_path / "out" / "runner.log").read_text()


def test_a_node_without_pip_gets_the_wheels_unpacked(bundle, tmp_path):
    spec = importlib.util.spec_from_file_location("node_command", NODE_COMMAND)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in ("invoke", "simplejpeg"):
        module.unpack(sorted((bundle / "wheels").glob(f"{name}-*.whl"))[0], tmp_path / "prefix")
    done = subprocess.run(
        [sys.executable, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import invoke, simplejpeg; "
         "print(invoke.__file__, simplejpeg.__file__)", str(tmp_path / "prefix")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(str(tmp_path / "prefix")) == 2


# The second slice's cell is left out (its row says so, and the slice exits 0): one cell trained in the
# command's first runner shows a cell runs there, and a second would train the same way again (about
# 4.5 CPU-s); the turn, the folders and the one budget are what the second slice is for.
TWO_SLICES = """
measured_steps: 2
slices:
  first:
    title: one smoke rung
    scale: smoke
    cells: [{recipe: vit-speedups, variant: baseline, seconds: 20}]
  second:
    title: another
    scale: smoke
    left_out: [{recipe: vit-speedups, variant: amp, why: "this test's second slice runs no trainer"}]
"""


def test_several_slices_run_in_turn_in_one_command_each_into_its_folder(
    bundle, node_python, scratch, tmp_path
):
    spec = tmp_path / "slices.yaml"
    spec.write_text(TWO_SLICES)
    common = ["--slices-file", str(spec), "--accelerator", "cpu"]
    done = subprocess.run(
        node_command(node_python, bundle, tmp_path, scratch, "first", "second", *common, "--budget-s", "400"),
        env=env(tmp_path), capture_output=True, text=True, timeout=420,
    )  # fmt: skip
    out = tmp_path / "out"
    assert done.returncode == 0, (out / "runner.log").read_text()[-3000:]
    assert [r["variant"] for r in rows(out / "first")] == ["baseline"]
    assert [r["variant"] for r in rows(out / "second")] == ["amp"]
    assert (out / "second" / "node-second.tar.gz").is_file()
    log = (out / "runner.log").read_text()
    assert "slice first: exit 0" in log and "slice second: exit 0" in log
    # The budget is one: with less than a minute of it left, a slice is not started, and says so.
    late = subprocess.run(
        node_command(node_python, bundle, tmp_path, scratch, "first", "second", *common, "--budget-s", "30"),
        env=env(tmp_path), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert late.returncode == 1
    assert "slice second: not started" in (out / "runner.log").read_text()
