"""Runtimes and container platforms are plug-ins: a new one is one file and one registry line, and the
session runs its cells through the same supervision loop as the kit's own."""

from __future__ import annotations

import json
import re

import pytest

from reprokit.contract.errors import ReprokitError
from reprokit.plan import accelerators
from reprokit.plan.request import Request
from reprokit.run import containers, runtimes, session, supervise
from reprokit.run.placement import plan
from reprokit.run.plugin_options import runtime_for
from tests.conftest import ROOT
from tests.fakes import FAKES, fake_recipe


@pytest.fixture
def fake_trainers(monkeypatch):
    monkeypatch.setenv("REPROKIT_TRAINERS_PATH", str(FAKES.parent))


def test_a_runtime_plug_in_is_one_file_and_one_registry_line(tmp_path, monkeypatch, fake_trainers):
    monkeypatch.setitem(runtimes.REGISTRY.targets, "nice", "tests.plugins.nice_runtime:NiceRuntime")
    recipe = str(
        fake_recipe(tmp_path / "fake.yaml", [{"name": "v", "baseline": True, "args": {"fake_rate": 50}}])
    )
    the_plan = plan(Request(recipes=[recipe], accelerator="cpu", scale="smoke", runtime="nice"))
    assert (the_plan.runtime, the_plan.container) == ("nice", "none")
    folder = session.new_dir(str(tmp_path / "results"))
    (outcome,) = supervise.run_cells(
        the_plan, folder, runtime_options={"niceness": 7}, report_line=lambda c, o: None
    )
    assert outcome["status"] == "ok" and outcome["samples_per_second"] == 50
    assert "niceness 7" in (folder / "runs" / "fake--v" / "stdout.log").read_text()
    # Its options are its own: another runtime's are refused in one line that says whose they are.
    with pytest.raises(
        ReprokitError, match=r"--partition is an option of the slurm runtime \(this session runs nice\)"
    ):
        runtime_for(the_plan, {"partition": "batch"})


def test_a_container_platform_plug_in_is_one_file_and_one_registry_line(tmp_path, monkeypatch, fake_trainers):
    monkeypatch.setitem(containers.REGISTRY.targets, "scrubbed", "tests.plugins.scrubbed_container:Scrubbed")
    monkeypatch.setenv("HF_TOKEN", "secret-to-scrub")
    recipe = str(fake_recipe(tmp_path / "fake.yaml", [{"name": "v", "baseline": True, "args": {}}]))
    the_plan = plan(
        Request(recipes=[recipe], accelerator="cpu", scale="smoke", runtime="local", container="scrubbed")
    )
    folder = session.new_dir(str(tmp_path / "results"))
    (outcome,) = supervise.run_cells(the_plan, folder, report_line=lambda c, o: None)
    assert outcome["status"] == "ok"
    # The same platform inside a Slurm job: its prefix on srun's command line.
    slurm_plan = plan(
        Request(recipes=[recipe], accelerator="cpu", scale="smoke", runtime="slurm", container="scrubbed")
    )
    runtime = runtime_for(slurm_plan, {"scrub": ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY")})
    text = runtime.dry_run(slurm_plan.cells[0], tmp_path / "s" / "runs" / "fake--v", accelerators.get("cpu"))
    assert 'env --unset=HF_TOKEN --unset=AWS_SECRET_ACCESS_KEY bash "$RUN_DIR/run.sh"' in text
    assert json.loads((folder / "runs" / "fake--v" / "cell.json").read_text())["cell_id"] == "fake--v"


def test_an_unknown_runtime_or_platform_is_one_line_naming_the_known_ones():
    with pytest.raises(ReprokitError, match=r"unknown runtime 'kubernetes'; known runtimes: local, slurm"):
        plan(Request(recipes=[], accelerator="cpu", scale="smoke", runtime="kubernetes"))
    with pytest.raises(
        ReprokitError, match=r"unknown container platform 'podman'; known container platforms: none, docker"
    ):
        plan(Request(recipes=[], accelerator="cpu", scale="smoke", runtime="local", container="podman"))
    with pytest.raises(
        ReprokitError, match=r"the slurm runtime runs cells in none, pyxis, apptainer, not docker"
    ):
        plan(Request(recipes=[], accelerator="cpu", scale="smoke", runtime="slurm", container="docker"))


def _documented_group(kind: str) -> str:
    # The group a plug-in author reads in ARCHITECTURE.md's "How to add ..." paragraph for `kind`.
    text = (ROOT / "ARCHITECTURE.md").read_text()
    paragraph = text[text.index(f"**A {kind}.**") :].split("\n\n")[0]
    (group,) = re.findall(r"`(reprokit\.[a-z_.]+)`", paragraph)
    return group


def test_a_plug_in_distribution_under_the_documented_entry_point_groups_is_loaded(tmp_path, monkeypatch):
    # A third-party distribution, installed as pip installs one: its module and its dist-info with
    # entry_points.txt, on sys.path. Nothing in the kit names it.
    (tmp_path / "acme_plugins.py").write_text(
        "from tests.plugins.nice_runtime import NiceRuntime\n"
        "from tests.plugins.scrubbed_container import Scrubbed\n"
    )
    info = tmp_path / "acme_plugins-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-plugins\nVersion: 1.0\n")
    runtime_group, container_group = _documented_group("runtime"), _documented_group("container platform")
    (info / "entry_points.txt").write_text(
        f"[{runtime_group}]\nacme-nice = acme_plugins:NiceRuntime\n\n"
        f"[{container_group}]\nacme-scrubbed = acme_plugins:Scrubbed\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for registry in (runtimes.REGISTRY, containers.REGISTRY):  # as in a fresh process: not yet discovered
        monkeypatch.setattr(registry, "targets", dict(registry.targets))
        monkeypatch.setattr(registry, "_discovered", False)
    assert "acme-nice" in runtimes.REGISTRY.names() and "acme-scrubbed" in containers.REGISTRY.names()
    assert runtimes.REGISTRY.load("acme-nice").name == "nice"
    the_plan = plan(
        Request(recipes=[], accelerator="cpu", scale="smoke", runtime="acme-nice", container="acme-scrubbed")
    )
    assert (the_plan.runtime, the_plan.container) == ("acme-nice", "acme-scrubbed")
