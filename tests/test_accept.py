"""Fleet acceptance (`inv accept`, reprokit/fleet/): per-device mode on one machine with a fake
driver listing and the fake trainer, the verdict's rule, and its outputs (the JSON against its schema,
the JUnit XML, the page). The Slurm half (a node slowed by a CPU hog, a drained node) is in
tests/test_slurm.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from xml.etree import ElementTree

import jsonschema
import pytest

from reprokit import schemas
from tests.conftest import run_inv
from tests.fakes import fake_env, fake_recipe
from tests.fakes.drivers import NVIDIA, nvidia_smi


def accepted(session: Path) -> dict:
    found = json.loads((session / "acceptance.json").read_text())
    jsonschema.Draft202012Validator(schemas.schema("acceptance")).validate(found)
    return found


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
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        result = run_inv(
            "accept", str(recipe), "--per-device", "--accelerator", "cuda", "--scale", "smoke",
            "--container", "none", "--results", str(root / "out"), env=env,
        )  # fmt: skip
    finally:
        os.environ.clear()
        os.environ.update(saved)
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
    assert slow["reasons"][0] == "40% below the other 2 device(s)' median 100 samples/s (more than 10%)"
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
