"""Fleet acceptance (`inv accept`, reprokit/fleet/): per-device mode on one machine with a fake
driver listing and the fake trainer, the verdict's rule, and its outputs (the JSON against its schema,
the JUnit XML, the page). The Slurm half (a node slowed by a CPU hog, a drained node) is in
tests/test_slurm.py."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

import jsonschema
import pytest

from reprokit import schemas
from reprokit.contract.records import Departure
from reprokit.fleet.judging import DEFAULT_RULE, FAILED, PASS, judge
from reprokit.fleet.outputs import Acceptance, drain_commands, junit
from reprokit.fleet.pairs import PairVerdict, ring
from reprokit.fleet.pairs import judge as judge_pairs
from reprokit.fleet.targets import Target
from reprokit.judge.result_row import Row
from tests.conftest import ROOT, run_inv
from tests.fakes import fake_env, fake_recipe
from tests.fakes.drivers import NVIDIA, nvidia_smi
from tests.test_slurm import cluster  # noqa: F401 - the fixture of a cluster that answers


def accepted(session: Path) -> dict:
    found = json.loads((session / "acceptance.json").read_text())
    jsonschema.Draft202012Validator(schemas.schema("acceptance")).validate(found)
    return found


@contextlib.contextmanager
def _environ(env: dict):
    """The kit in this process lists the devices with the PATH it sees: the fake driver's."""
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="module")
def four_gpus(tmp_path_factory):
    """A machine with four H100s (a fake nvidia-smi) whose GPU 2 is slow and GPU 3 fails, accepted
    per device once: what the tests below read."""
    root = tmp_path_factory.mktemp("four_gpus")
    nvidia_smi(root / "bin", [NVIDIA["h100"]] * 4)
    recipe = fake_recipe(
        root / "fake.yaml",
        [{"name": "v", "baseline": True,
          "args": {"fake_rate_by_device": "0=100,1=100,2=60,3=100", "fake_crash_on_device": "3"}}],
    )  # fmt: skip
    env = {**fake_env(), "PATH": f"{root / 'bin'}:{os.path.dirname(sys.executable)}:/usr/bin:/bin"}
    with _environ(env):
        result = run_inv(
            "accept", str(recipe), "--per-device", "--accelerator", "cuda", "--scale", "smoke",
            "--container", "none", "--results", str(root / "out"), env=env,
        )  # fmt: skip
    sessions = sorted((root / "out").iterdir())
    return result, sessions[-1]


def test_per_device_runs_the_one_device_cell_on_each_gpu_alone_with_its_identity(four_gpus):
    result, session = four_gpus
    runs = sorted(p.name for p in (session / "runs").iterdir())
    assert runs == [f"fake--v--gpu{i}" for i in range(4)], result.stdout + result.stderr
    for i in range(4):
        seen = json.loads((session / "runs" / f"fake--v--gpu{i}" / "argv.json").read_text())
        assert seen["CUDA_VISIBLE_DEVICES"] == str(i)
        assert json.loads((session / "runs" / f"fake--v--gpu{i}" / "cell.json").read_text())["devices"] == 1
    nodes = {n["target"]: n for n in accepted(session)["nodes"]}
    assert nodes["gpu1"]["identity"]["uuid"] == "GPU-00000001-7c1e-4a52-9d63-5f0e8b2a0001"
    assert nodes["gpu1"]["identity"]["model"] == NVIDIA["h100"] and nodes["gpu1"]["identity"]["index"] == "1"


def test_the_slow_gpu_and_the_failed_one_are_named_worst_first_and_the_run_exits_non_zero(four_gpus):
    result, session = four_gpus
    assert result.returncode == 1, result.stdout + result.stderr
    assert "2 of 4 device(s) failing: gpu3 (failed), gpu2 (slow)" in result.stderr
    found = accepted(session)
    assert not found["passed"] and found["mode"] == "device"
    assert [(n["target"], n["status"]) for n in found["nodes"]] == [
        ("gpu3", "failed"), ("gpu2", "slow"), ("gpu0", "pass"), ("gpu1", "pass"),
    ]  # fmt: skip
    failed, slow = found["nodes"][:2]
    assert failed["error"].startswith("RuntimeError: device 3 fell off the bus")
    assert slow["measured"] == 60 and slow["others_median"] == 100
    assert (
        slow["reasons"][0] == "40% below the median of the other 2 device(s), 100 samples/s (more than 10%)"
    )
    # Per device: no Slurm node to drain.
    assert found["drain"] == []
    # The table, worst first, in the terminal.
    table = result.stdout[result.stdout.index("acceptance of") :]
    assert table.index("gpu3") < table.index("gpu2") < table.index("gpu0")


def test_the_junit_xml_has_a_case_per_gpu_a_failure_for_the_slow_and_an_error_for_the_failed(four_gpus):
    _, session = four_gpus
    suite = ElementTree.parse(session / "acceptance.xml").getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "1", "1")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["gpu2"].find("failure").get("message").startswith("40% below")
    assert "fell off the bus" in cases["gpu3"].find("error").get("message")
    assert list(cases["gpu0"]) == []


def test_the_page_draws_a_bar_per_gpu_with_the_fleet_median(four_gpus):
    _, session = four_gpus
    page = (session / "acceptance.html").read_text()
    assert page.count("<rect") == 1 + 3  # the fleet's band, and a bar per measured GPU
    assert "<title>fleet median</title>" in page and "failed</text>" in page


def test_two_acceptance_runs_compare_node_by_node_and_history_keeps_each_gpu_a_series(four_gpus):
    """Before and after (a driver update, a reseated GPU): compare names the GPUs whose figure changed."""
    _, before = four_gpus
    root = before.parent.parent
    nvidia_smi(root / "bin", [NVIDIA["h100"]] * 4)
    (root / "after").mkdir()
    recipe = fake_recipe(
        root / "after" / "fake.yaml",
        [{"name": "v", "baseline": True, "args": {"fake_rate_by_device": "0=60,1=100,2=100,3=100"}}],
    )
    env = {**fake_env(), "PATH": f"{root / 'bin'}:{os.path.dirname(sys.executable)}:/usr/bin:/bin"}
    with _environ(env):
        after_run = run_inv(
            "accept", str(recipe), "--per-device", "--accelerator", "cuda", "--scale", "smoke",
            "--container", "none", "--results", str(root / "out"), env=env,
        )  # fmt: skip
    assert after_run.returncode == 1 and "gpu0 (slow)" in after_run.stderr, after_run.stderr
    after = sorted((root / "out").iterdir())[-1]
    compared = run_inv("compare", "-a", str(before), "-b", str(after), "--noise", "5", "--json")
    assert compared.returncode == 0, compared.stderr
    found = json.loads(compared.stdout)
    jsonschema.Draft202012Validator(schemas.schema("compare")).validate(found)
    verdicts = {c["cell_id"]: c["verdict"] for c in found["cells"]}
    assert verdicts["fake--v--gpu0"] == "regressed" and verdicts["fake--v--gpu2"] == "improved"
    assert verdicts["fake--v--gpu1"] == "same"
    history = json.loads(run_inv("history", "fake", "--results", str(root / "out"), "--json").stdout)
    series = sorted({(r["session"], r["cell_id"]) for r in history["rows"]})
    # Each GPU its own series in each session (gpu3 failed in the first: no figure to plot).
    assert [c for s, c in series if s == before.name] == ["fake--v--gpu0", "fake--v--gpu1", "fake--v--gpu2"]
    assert [c for s, c in series if s == after.name] == [f"fake--v--gpu{i}" for i in range(4)]


def test_an_acceptance_session_is_not_resumed_as_a_plan_of_flags_would_be(four_gpus):
    _, session = four_gpus
    result = run_inv("resume", str(session))
    assert result.returncode == 2
    assert result.stderr == (
        f"reprokit: {session.name} is an acceptance run (`accept`): run the acceptance again, a new session "
        "that `compare` can set beside this one\n"
    )


# ---- the rule, on rows as collect makes them -------------------------------------------------------


def _node(name: str, rate: float | None, **row) -> tuple[Target, Row, Path]:
    fields = {"status": "ok" if rate is not None else "failed", "measured_per_device": rate,
              "unit": "img/s", "cell_id": f"c--on-{name}", **row}  # fmt: skip
    return Target("node", name, {"slurm_node": name}), Row(**fields), Path("/nowhere") / name


def test_a_node_within_its_siblings_spread_passes_and_one_beyond_it_is_slow_with_the_measured_cause():
    same = {"data_wait_share": 0.05, "provenance": {"hw_accelerator_power_limit_w": 700.0}}
    fleet = [_node(f"n{i}", rate, **same) for i, rate in enumerate([100, 98, 103, 97, 101, 99])]
    # 12% below: beyond the 10% gap, but within 3 x 1.4826 x MAD of noisier siblings it would pass.
    identity = {
        "hostname": "gpu-a06",
        "hw_accelerator_uuids": "GPU-5a7c,GPU-0b1d",
        "hw_accelerator_serials": None,
    }
    slow = _node("n6", 88.0, data_wait_share=0.30, provenance={"hw_accelerator_power_limit_w": 400.0, **identity},
                 departures=[Departure(reason="the machine was shared while the run measured")])  # fmt: skip
    found = {v.target: v for v in judge([*fleet, slow])}
    assert {n for n, v in found.items() if v.status == "slow"} == {"n6"}
    assert found["n6"].reasons == [
        "12% below the median of the other 6 node(s), 99.5 img/s (more than 10%)",
        "data wait 30% of the measured window (others 5%)",
        "power limit (W) 400 (others 700)",
        "departure: the machine was shared while the run measured",
    ]
    # Named by what its run recorded of the node and its GPUs (what it did not say is left out).
    assert found["n6"].identity == {
        "slurm_node": "n6",
        "hostname": "gpu-a06",
        "hw_accelerator_uuids": "GPU-5a7c,GPU-0b1d",
    }
    noisy = [_node(f"n{i}", rate) for i, rate in enumerate([100, 80, 120, 90, 110, 85])]
    spread = {v.target: v for v in judge([*noisy, _node("n6", 84.0)])}
    assert spread["n6"].status == "pass" and spread["n6"].threshold > 0.3


def test_a_node_below_the_publication_is_slow_even_when_its_siblings_are_as_slow():
    published = {"verdict": "slower", "ratio_per_device": 0.7, "reference_per_device": 100.0}
    found = judge([_node("a", 70.0, **published), _node("b", 70.0, **published)])
    assert [v.status for v in found] == ["slow", "slow"]
    assert found[0].reasons[0] == "70% of the published 100 img/s per device"


def test_a_failed_node_is_named_with_its_error_and_never_counts_in_the_median():
    found = judge([_node("a", 100.0), _node("b", None, error="CUDA error: an illegal memory access"),
                   _node("c", 50.0)])  # fmt: skip
    assert [(v.target, v.status) for v in found] == [("b", "failed"), ("c", "slow"), ("a", "pass")]
    assert found[0].error == "CUDA error: an illegal memory access" and found[0].measured is None
    assert found[1].others_median == 100.0


def test_a_slow_link_among_pairs_is_named_and_a_failed_pair_keeps_its_error():
    def pair(a: str, b: str, busbw: float | None, error: str | None = None) -> PairVerdict:
        return PairVerdict(f"{a}-{b}", [a, b], PASS if busbw is not None else FAILED, busbw, error=error)

    ring_ = [pair("n1", "n2", 22.0), pair("n2", "n3", 23.0), pair("n3", "n4", 9.5), pair("n4", "n5", 22.5),
             pair("n5", "n1", None, "RuntimeError: NCCL error: remote process exited (Slurm job 7 FAILED)")]  # fmt: skip
    found = judge_pairs(ring_, DEFAULT_RULE)
    assert [(v.pair, v.status) for v in found] == [
        ("n5-n1", "failed"), ("n3-n4", "slow"), ("n1-n2", "pass"), ("n4-n5", "pass"), ("n2-n3", "pass"),
    ]  # fmt: skip
    assert found[1].reasons == [
        "58% below the median of the other 3 pair(s), 22.5 GB/s bus bandwidth (more than 10%)"
    ]
    assert [(a.name, b.name) for a, b in ring([Target("node", n) for n in ("n1", "n2", "n3")])] == [
        ("n1", "n2"), ("n2", "n3"), ("n3", "n1"),
    ]  # fmt: skip
    # A pair's case in the JUnit XML beside the nodes'.
    suite = ElementTree.fromstring(
        junit(Acceptance(Path("s"), "c", "node", DEFAULT_RULE, [], found)).encode()
    )
    assert suite.get("failures") == "1" and suite.get("errors") == "1"
    assert [c.get("name") for c in suite.iter("testcase")][:2] == ["pair n5-n1", "pair n3-n4"]


def test_an_error_with_control_characters_keeps_the_junit_xml_readable_and_the_drain_command_one_line(
    tmp_path,
):
    hostile = "RuntimeError: \x1b[2Jcleared\nsecond line\x00 and a quote ' too"
    found = Acceptance(
        tmp_path, "c", "node", DEFAULT_RULE, judge([_node("n1", None, error=hostile), _node("n2", 100.0)])
    )
    suite = ElementTree.fromstring(junit(found).encode())
    assert (
        suite.find("testcase/error").get("message")
        == "RuntimeError: \\x1b[2Jcleared\\nsecond line\\x00 and a quote ' too"
    )
    (command,) = drain_commands(found)
    assert (
        "\n" not in command
        and "\x1b" not in command
        and command.startswith("scontrol update nodename=n1 state=drain")
    )
    assert shlex.split(command)[-1].startswith("reason=reprokit accept: failed: RuntimeError: \\x1b[2J")


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--deviations", "many"), "reprokit: --deviations many: give a number from 0 to 100"),
        (("--min-gap", "1.5"), "reprokit: --min-gap 1.5: give a number from 0 to 1"),
        (("--runtime", "local"), "reprokit: an acceptance run over nodes runs one Slurm job per node: --runtime slurm"),
        (("--per-device", "--pairs"), "reprokit: --pairs measures the collective between nodes; --per-device runs"),
        (("--per-device", "--runtime", "local", "--container", "docker"),
         "reprokit: --per-device sets each run's visible device, which a Docker container does not take"),
    ],
)  # fmt: skip
def test_a_bad_acceptance_request_is_one_line_naming_what_to_give(flags, said, tmp_path):
    result = run_inv("accept", "bridgetower", "--variant", "workers0", "--accelerator", "cpu", "--scale", "smoke",
                     "--results", str(tmp_path / "out"), *flags)  # fmt: skip
    assert result.returncode == 2 and result.stderr.startswith(said), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_an_acceptance_run_is_of_one_cell():
    result = run_inv(
        "accept", "bridgetower", "--accelerator", "cpu", "--scale", "smoke", "--runtime", "slurm"
    )
    assert result.returncode == 2
    assert "an acceptance run measures one cell on every node; these flags plan 3" in result.stderr


# ---- on the CI cluster's two nodes -----------------------------------------------------------------
# Both Slurm nodes are daemons on this one machine. A node is made slower for real: its slurmd is moved
# into a CPU cgroup with a hard quota (a fifth of one CPU per period), which its job steps inherit, so its
# trainer gets at most that whatever else this machine runs, while the other node's gets what the machine
# gives it. Nothing the trainer reads is changed. (Not nice: each job step runs in a session of its own,
# whose autogroup takes no account of a process's nice; and a hog beside a node slows every test that
# runs meanwhile, where a quota takes CPU from no one.)
CPU_CGROUP = Path("/sys/fs/cgroup/cpu")
SLOW_QUOTA = 0.2  # of one CPU


def _vit_fleet_recipe(tmp_path: Path) -> Path:
    """The ViT ladder's smoke baseline over 24 steps (the recipe's 6 measure 0.3 s, too short a window
    for a node's share of the CPUs to show through this machine's other work)."""
    import yaml

    data = yaml.safe_load((ROOT / "recipes" / "vit-speedups" / "recipe.yaml").read_text())
    data["name"] = "vitfleet"
    data["scales"]["smoke"]["args"].update(max_steps=24, logging_steps=4)
    path = tmp_path / "vitfleet.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@contextlib.contextmanager
def _capped_cgroup(node: str):
    """The node's slurmd (every thread: any may fork a job step) in a CPU cgroup of SLOW_QUOTA of one CPU,
    put back in the root cgroup after; fails under CI (skips elsewhere) where this machine has no
    writable cgroup v1 cpu controller."""
    group = CPU_CGROUP / f"reprokit-test-slow-{node}"
    try:
        group.mkdir(exist_ok=True)
        period = int((group / "cpu.cfs_period_us").read_text())
        (group / "cpu.cfs_quota_us").write_text(str(int(period * SLOW_QUOTA)))
    except OSError as exc:
        why = f"no writable CPU cgroup here ({CPU_CGROUP}: {exc.strerror}) to slow a node's jobs with"
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(why)  # CI's machine has one: a skip there would hide the test
        pytest.skip(why)
    pid = int(Path(f"/run/reprokit-slurm/slurmd-{node}.pid").read_text())
    (group / "cgroup.procs").write_text(str(pid))
    try:
        yield
    finally:
        for tid in (group / "tasks").read_text().split():
            with contextlib.suppress(OSError):
                (CPU_CGROUP / "tasks").write_text(tid)
        with contextlib.suppress(OSError):
            group.rmdir()


def _accept_on_cluster(tmp_path: Path, recipe: Path, *extra: str, env: dict | None = None):
    return run_inv(
        "accept", str(recipe), "--runtime", "slurm", "--accelerator", "cpu", "--scale", "smoke",
        "--container", "none", "--partition", "ci", "--results", str(tmp_path / "out"), *extra,
        timeout=600, env=env,
    )  # fmt: skip


def _latest(tmp_path: Path) -> Path:
    return sorted((tmp_path / "out").iterdir())[-1]


@pytest.mark.slurm
@pytest.mark.usefixtures("cluster")
def test_a_node_slowed_by_a_cpu_quota_is_named_and_the_same_run_unslowed_passes(tmp_path):
    recipe = _vit_fleet_recipe(tmp_path)
    # n1's jobs get a fifth of a CPU at most: a gap far beyond 50%. --min-gap 0.5 keeps this machine's
    # other work (the rest of the suite, image builds) from making an unslowed node slow: both nodes share
    # its two cores, and at 0.25 a loaded run once read n2 29% below n1 with nothing slowed.
    started = time.monotonic()
    with _capped_cgroup("n1"):
        slowed = _accept_on_cluster(tmp_path, recipe, "--variant", "baseline", "--min-gap", "0.5")
    slowed_s = time.monotonic() - started
    slowed_session = _latest(tmp_path)
    started = time.monotonic()
    unslowed = _accept_on_cluster(tmp_path, recipe, "--variant", "baseline", "--min-gap", "0.5", "--pairs")
    unslowed_s = time.monotonic() - started
    print(f"acceptance of two nodes: {slowed_s:.0f} s with n1 slowed, {unslowed_s:.0f} s without")
    assert slowed.returncode == 1, slowed.stdout + slowed.stderr[-3000:]
    assert "1 of 2 node(s) failing: n1 (slow)" in slowed.stderr
    found = accepted(slowed_session)
    assert [(n["target"], n["status"]) for n in found["nodes"]] == [("n1", "slow"), ("n2", "pass")]
    slow = found["nodes"][0]
    assert slow["reasons"][0].startswith(f"{slow['gap']:.0%} below the median of the other 1 node(s), ")
    assert slow["identity"]["slurm_node"] == "n1" and slow["identity"]["machine"] == "n1"
    assert slow["job_id"] and found["drain"] == [
        f"scontrol update nodename=n1 state=drain reason='reprokit accept: slow: {slow['reasons'][0]}'"
    ]
    assert "scontrol update nodename=n1 state=drain" in slowed.stdout  # printed, never run:
    assert (
        subprocess.run(["sinfo", "-h", "-n", "n1", "-o", "%t"], capture_output=True, text=True).stdout.strip()
        != "drain"
    )
    suite = ElementTree.parse(slowed_session / "acceptance.xml").getroot()
    assert (suite.get("failures"), suite.get("errors")) == ("1", "0")
    assert "<title>fleet median</title>" in (slowed_session / "acceptance.html").read_text()
    assert unslowed.returncode == 0, unslowed.stdout + unslowed.stderr[-3000:]
    found = accepted(_latest(tmp_path))
    assert found["passed"]
    # --pairs: the all-reduce between the two nodes, gloo on the CPU, one pair: measured, nothing to hold it to.
    (pair,) = found["pairs"]
    assert (pair["pair"], pair["status"]) == ("n1-n2", "not judged") and pair["busbw"] > 0
    measured = json.loads((Path(pair["run_dir"]) / "allreduce.json").read_text())
    # Rank 0 is wherever the rendezvous put it: the hosts in any order, one rank on each node.
    assert measured["backend"] == "gloo" and sorted(measured["hosts"]) == ["n1", "n2"]


@pytest.mark.slurm
@pytest.mark.usefixtures("cluster")
def test_a_node_drained_while_its_job_waits_is_failed_with_its_state_and_the_other_is_judged(tmp_path):
    recipe = fake_recipe(tmp_path / "fake.yaml", [{"name": "v", "baseline": True, "args": {}}])
    subprocess.run(["scontrol", "update", "nodename=n2", "state=drain", "reason=fan failure"], check=True)
    try:
        result = _accept_on_cluster(tmp_path, recipe, env=fake_env())
    finally:
        subprocess.run(["scontrol", "update", "nodename=n2", "state=resume"], check=True)
    assert result.returncode == 1, result.stdout + result.stderr[-3000:]
    found = accepted(_latest(tmp_path))
    failed, other = found["nodes"]
    assert (failed["target"], failed["status"]) == ("n2", "failed")
    assert re.fullmatch(r"node n2 is drain(ed|ing) \(fan failure\): its Slurm job \d+ waited and was cancelled",
                        failed["error"])  # fmt: skip
    # n1 measured, alone: no sibling and no published figure at the smoke scale to hold it to.
    assert (other["target"], other["status"], other["measured"]) == ("n1", "not judged", 100.0)
    state = subprocess.run(["squeue", "-h", "-j", failed["job_id"]], capture_output=True, text=True)
    assert state.stdout.strip() == ""
    # Each node's job was pinned to it, and names it as the machine its run recorded (history's series).
    sbatch = (_latest(tmp_path) / "runs" / "fake--v--on-n2" / "sbatch.sh").read_text()
    assert "#SBATCH --nodelist=n2\n" in sbatch and "export REPROKIT_MACHINE=n2\n" in sbatch
