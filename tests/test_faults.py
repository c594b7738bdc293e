"""The kit's own death, a full disk and a shared machine, tried for real: a kit killed with -9 takes
its trainer with it, a resume refuses to start a second trainer beside a live one, a killed
trainer's reason names the signal, storage that refuses a write ends the cell in one line and
stops the session cleanly, two sessions on one machine take turns, and the warden of a container
stops it however many SIGTERMs the kernel sends."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reprokit.contract import files, sessions
from reprokit.plan.request import Request
from reprokit.run import session, supervise
from reprokit.run.placement import plan
from tests import faultfs
from tests.conftest import INV, ROOT, run_inv
from tests.fakes import FAKES, fake_env, fake_recipe
from tests.faultfs import needs_namespaces

CPU = ("--accelerator", "cpu", "--scale", "smoke", "--runtime", "local")


def _wait_for(predicate, timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


@contextlib.contextmanager
def _kit(recipe: Path, out: Path, env: dict | None = None) -> Iterator[subprocess.Popen]:
    """`inv reproduce` in a process group of its own (cleaned up whatever the test does)."""
    proc = subprocess.Popen(
        [*INV, "reproduce", str(recipe), *CPU, "--results", str(out)],
        cwd=ROOT, env={**os.environ, **fake_env(), **(env or {})}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)


def _trainer_pid(out: Path, cell: str) -> int:
    def written() -> str:
        found = list(out.glob(f"*/runs/{cell}/fake.pid"))
        return found[0].read_text() if found else ""

    _wait_for(written, what=f"{cell}'s trainer")
    return int(written())


def test_a_kit_killed_with_sigkill_takes_its_trainer_with_it(tmp_path):
    recipe = fake_recipe(tmp_path / "r.yaml", [{"name": "hang", "args": {"fake_hang": True}}])
    out = tmp_path / "results"
    with _kit(recipe, out) as kit:
        trainer = _trainer_pid(out, "fake--hang")
        os.kill(kit.pid, signal.SIGKILL)  # the kit alone, as the OOM killer or `kill -9 PID` does
        _wait_for(lambda: not _alive(trainer), timeout=10, what="the trainer to end with its kit")


def test_resume_refuses_to_start_a_second_trainer_beside_a_live_one(tmp_path):
    marker = tmp_path / "hung-once"
    recipe = fake_recipe(
        tmp_path / "r.yaml",
        [{"name": "stubborn", "args": {"fake_hang_once": str(marker), "fake_ignore_term": True}}],
    )
    out = tmp_path / "results"
    with _kit(recipe, out) as kit:
        trainer = _trainer_pid(out, "fake--stubborn")
        os.kill(kit.pid, signal.SIGKILL)
        kit.wait(30)
    time.sleep(0.5)
    assert _alive(trainer)  # it ignores the SIGTERM its kit's death sent
    (session_dir,) = out.iterdir()
    run_dir = session_dir / "runs" / "fake--stubborn"
    before = sorted(p.name for p in run_dir.iterdir())
    try:
        refused = run_inv("resume", str(session_dir), env=fake_env())
        assert refused.returncode == 2
        assert "Session:" not in refused.stderr
        assert refused.stderr.strip().splitlines()[-1] == (
            "reprokit: cannot resume while a cell of the session still runs (fake--stubborn: its trainer is "
            f"still running (pid {trainer}; stop it with: kill -- -{trainer})); wait for it to end"
        )
        assert sorted(p.name for p in run_dir.iterdir()) == before and _alive(trainer)
    finally:
        os.killpg(trainer, signal.SIGKILL)
    _wait_for(lambda: not _alive(trainer), what="the trainer to be killed")
    resumed = run_inv("resume", str(session_dir), env=fake_env())
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "ok"
    assert not (run_dir / "supervisor.json").exists()


def test_a_trainer_killed_by_a_signal_is_recorded_with_the_signal_not_its_last_line(tmp_path):
    recipe = fake_recipe(tmp_path / "r.yaml", [{"name": "killed", "args": {"fake_kill_self": True}}])
    out = tmp_path / "results"
    done = run_inv("reproduce", str(recipe), *CPU, "--results", str(out), env=fake_env())
    assert done.returncode == 1
    (summary,) = out.glob("*/runs/fake--killed/summary.json")
    found = json.loads(summary.read_text())
    assert found["exit_code"] == -9 and "3/6" in found["log_tail"][-1]
    assert found["error"] == (
        "the trainer was killed by SIGKILL (signal 9) (the kernel's out-of-memory killer, or a kill -9)"
    )


@needs_namespaces
def test_a_full_disk_ends_the_cell_in_one_line_stops_the_session_and_leaves_no_temporary_file(tmp_path):
    recipe = fake_recipe(
        tmp_path / "r.yaml",
        [
            {"name": "fill", "baseline": True, "args": {"fake_fill": True}},
            {"name": "after", "args": {"fake_rate": 5}},
        ],
    )
    out = tmp_path / "disk"
    out.mkdir()
    # The kit on a 1 MiB disk; what it left is listed before the namespace (and its tmpfs) goes.
    script = (
        f'{" ".join(INV)} reproduce {recipe} {" ".join(CPU)} --results {out}; echo "exit=$?"; '
        f"find {out} -name '.*tmp*' -printf 'temporary %p\\n'; find {out} -name summary.json -printf 'summary %p\\n'"
    )
    done = faultfs.run(
        ["sh", "-c", script], tiny={out: "1m"}, cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, **fake_env()},
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    assert "exit=1" in done.stdout, done.stdout + done.stderr
    assert "temporary " not in done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("reprokit: stopped at fake--fill: the kit could not write ")
    assert (
        "/runs/fake--fill/summary.json: No space left on device (ENOSPC); 2 of 2 cells did not complete"
        in last
    )
    assert "finish the session with: inv resume " in last
    assert "results not written: " in done.stderr and "ENOSPC" in done.stderr


@needs_namespaces
def test_a_results_folder_that_fills_after_the_cells_measured_ends_the_session_non_zero_in_one_line(tmp_path):
    out = tmp_path / "disk"
    out.mkdir()
    recipe = fake_recipe(
        tmp_path / "r.yaml",
        [
            {"name": "a", "baseline": True, "args": {"fake_rate": 5}},
            {"name": "b", "args": {"fake_rate": 5}},
            # Once it has measured, another user's file fills the disk the results folder is on.
            {"name": "c", "args": {"fake_rate": 5, "fake_fill_after": str(out / "someone-elses.bin")}},
        ],
    )
    script = f'{" ".join(INV)} reproduce {recipe} {" ".join(CPU)} --results {out}; echo "exit=$?"'
    done = faultfs.run(
        ["sh", "-c", script], tiny={out: "2m"}, cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, **fake_env()},
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    assert "ok     [3/3] fake--c" in done.stderr
    assert "exit=1" in done.stdout, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("reprokit: results not written: ") and "No space left on device (ENOSPC)" in last
    assert "/runs: make room (or give write access) there, then: inv report " in last


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES, errno.ENOSPC], ids=["EROFS", "EACCES", "ENOSPC"])
def test_storage_that_refuses_a_write_ends_the_cell_as_failed_and_stops_the_session(
    tmp_path, monkeypatch, code
):
    monkeypatch.setenv("REPROKIT_TRAINERS_PATH", str(FAKES.parent))
    recipe = str(fake_recipe(tmp_path / "r.yaml", [{"name": n, "args": {"fake_rate": 5}} for n in "abc"]))
    request = Request(recipes=[recipe], accelerator="cpu", scale="smoke", runtime="local")
    the_plan = plan(request)
    session_dir = session.new_dir(str(tmp_path / "results"))
    written = files.write_bytes

    def refusing(path, data, mode=files.FILE_MODE):
        if Path(path).parent.name == "fake--b" and Path(path).name == "run.sh":
            raise OSError(code, os.strerror(code), str(path))
        return written(path, data, mode)

    monkeypatch.setattr(files, "write_bytes", refusing)
    with pytest.raises(supervise.SessionStopped) as stopped:
        supervise.run_cells(the_plan, session_dir, report_line=lambda cell, outcome: None)
    name = errno.errorcode[code]
    where = session_dir.resolve() / "runs" / "fake--b" / "run.sh"
    assert str(stopped.value) == f"fake--b: the kit could not write {where}: {os.strerror(code)} ({name})"
    assert [o["status"] for o in stopped.value.outcomes] == ["ok", "failed"]
    assert not (session_dir / "runs" / "fake--c").exists()
    assert not list(session_dir.rglob(".*tmp*"))


def test_a_second_session_on_the_machine_waits_for_the_first(tmp_path):
    locks = {"REPROKIT_LOCK_DIR": str(tmp_path / "locks")}
    first = fake_recipe(tmp_path / "a.yaml", [{"name": "first", "args": {"fake_rate": 5, "fake_linger": 3}}])
    second = fake_recipe(tmp_path / "b.yaml", [{"name": "second", "args": {"fake_rate": 5}}])
    with _kit(first, tmp_path / "a", locks) as kit:
        _trainer_pid(tmp_path / "a", "fake--first")
        waited = run_inv(
            "reproduce", str(second), *CPU, "--results", str(tmp_path / "b"), env={**fake_env(), **locks}
        )
        assert kit.wait(60) == 0
    assert waited.returncode == 0, waited.stderr
    assert "waiting for this machine: session " in waited.stderr
    (ended,) = (tmp_path / "a").glob("*/runs/fake--first/summary.json")
    (began,) = (tmp_path / "b").glob("*/runs/fake--second/sysinfo.json")
    finished = sessions.parse_time(json.loads(ended.read_text())["finished_at"])
    started = sessions.parse_time(json.loads(began.read_text())["started_at"])
    assert (started - finished).total_seconds() >= 2  # after the first trainer's 3 s linger


def test_run_sh_by_hand_or_in_a_slurm_job_takes_its_nodes_lock(tmp_path):
    from reprokit.plan import accelerators
    from reprokit.run.runtimes.base import write_run_dir_inputs

    recipe = fake_recipe(tmp_path / "r.yaml", [{"name": "v", "args": {"fake_rate": 5, "fake_linger": 2}}])
    (cell,) = plan(Request(recipes=[str(recipe)], accelerator="cpu", scale="smoke", runtime="local")).cells
    script = write_run_dir_inputs(cell, accelerators.get("cpu"), tmp_path / "run")
    env = {**os.environ, **fake_env(), "PYTHON": sys.executable, "REPROKIT_LOCK_DIR": str(tmp_path / "locks")}
    env.pop("REPROKIT_MACHINE_LOCKED", None)
    (tmp_path / "locks").mkdir()
    first = subprocess.Popen(["bash", str(script)], env={**env, "RUN_DIR": str(tmp_path / "one")},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    _wait_for(lambda: (tmp_path / "one" / "fake.pid").exists(), what="the first run")
    second = subprocess.run(["bash", str(script)], env={**env, "RUN_DIR": str(tmp_path / "two")},
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert first.wait(60) == 0 and second.returncode == 0, second.stderr
    assert "reprokit: waiting for this machine: another run holds " in second.stderr
    finished = json.loads((tmp_path / "one" / "summary.json").read_text())["finished_at"]
    started = json.loads((tmp_path / "two" / "sysinfo.json").read_text())["started_at"]
    assert (sessions.parse_time(started) - sessions.parse_time(finished)).total_seconds() >= 1


@pytest.mark.parametrize("after_s", [0.0, 1.5], ids=["while-it-starts", "while-it-waits"])
def test_the_container_warden_takes_a_burst_of_sigterms_and_still_asks_the_engine(after_s):
    # The kernel may send the warden more than one SIGTERM (its parent, then each process it is
    # reparented to); one that arrived during the docker import once left a container running.
    from reprokit.run.containers import warden

    warden_proc = subprocess.Popen(
        [sys.executable, "-m", "reprokit.run.containers.warden", "no-such-container"],
        cwd=ROOT, env={**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"},
        stderr=subprocess.PIPE, text=True, preexec_fn=warden.preexec(),
    )  # fmt: skip
    time.sleep(after_s)
    for _ in range(20):
        warden_proc.send_signal(signal.SIGTERM)
        time.sleep(0.01)
    _, err = warden_proc.communicate(timeout=60)
    assert (warden_proc.returncode, err) == (0, "")


@needs_namespaces
def test_a_report_into_a_read_only_session_is_one_line_naming_the_path(tmp_path):
    import shutil

    session_dir = tmp_path / "results" / "s"
    shutil.copytree(ROOT / "tests" / "fixtures" / "results_session" / "20250102-030405", session_dir)
    for task in ("collect", "report"):
        refused = faultfs.run(
            [*INV, task, str(session_dir)], read_only=[session_dir], cwd=ROOT,
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert refused.returncode == 1, refused.stderr
        assert "Traceback" not in refused.stderr
        assert refused.stderr.strip().splitlines()[-1] == (
            f"reprokit: cannot write {session_dir / 'results.csv'}: Read-only file system (EROFS)"
        )


def test_a_trainer_that_outlives_its_killed_kit_keeps_the_machine_until_it_ends(tmp_path):
    locks = {"REPROKIT_LOCK_DIR": str(tmp_path / "locks")}
    stubborn = fake_recipe(
        tmp_path / "a.yaml",
        [{"name": "stubborn", "args": {"fake_hang_once": str(tmp_path / "hung"), "fake_ignore_term": True}}],
    )
    second = fake_recipe(tmp_path / "b.yaml", [{"name": "second", "args": {"fake_rate": 5}}])
    with _kit(stubborn, tmp_path / "a", locks) as kit:
        trainer = _trainer_pid(tmp_path / "a", "fake--stubborn")
        os.kill(kit.pid, signal.SIGKILL)
        kit.wait(30)
    try:
        time.sleep(0.5)
        assert _alive(trainer)  # it ignored the SIGTERM of its kit's death
        with _kit(second, tmp_path / "b", locks) as waiting:
            time.sleep(5)
            assert waiting.poll() is None  # waits for the machine: nothing of it has run
            assert not list((tmp_path / "b").glob("*/runs/fake--second/sysinfo.json"))
            os.killpg(trainer, signal.SIGKILL)
            _wait_for(lambda: not _alive(trainer), what="the trainer to be killed")
            _, said = waiting.communicate(timeout=120)
            assert waiting.returncode == 0, said[-2000:]
            assert "waiting for this machine" in said
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(trainer, signal.SIGKILL)
