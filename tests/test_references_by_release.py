"""A recipe keeps, beside its publication's figures, a vendor's committed CI figures release by release
(bridgetower: optimum-habana's BridgeTower-large baselines, SynapseAI 1.12 to 1.20). `inv show` lists
every release; `--reference ID` judges against one, the publication's figures staying the default; the
report and results.csv name the release of the figure a cell was judged against; a Gaudi3's figure
judges only a cell that ran on a Gaudi3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reprokit import schemas
from reprokit.collect import run_row
from reprokit.contract.errors import ReprokitError
from reprokit.judge import verdicts
from reprokit.judge.result_row import Row
from reprokit.plan import cells, recipes, release_choice
from reprokit.report import report
from tests.conftest import run_inv
from tests.fakes.summaries import complete

VARIANT = "workers2-mediapipe"
RELEASES = {  # id: (device, figure, date, release) as optimum-habana's history gives them
    "synapse-1.12.0": ("gaudi2", 921.069, "2023-11-04", "SynapseAI 1.12.0, optimum-habana 1.9.0.dev0"),
    "synapse-1.14.0": ("gaudi2", 930.245, "2024-02-12", "SynapseAI 1.14.0, optimum-habana 1.11.0.dev0"),
    "synapse-1.15.0": ("gaudi2", 918.387, "2024-03-30", "SynapseAI 1.15.0, optimum-habana 1.11.0.dev0"),
    "synapse-1.19.0": ("gaudi2", 904.93, "2025-02-07", "SynapseAI 1.19.0, optimum-habana 1.16.0.dev0"),
    "synapse-1.20.0": ("gaudi3", 783.481, "2025-04-11", "SynapseAI 1.20.0, optimum-habana 1.17.0.dev0"),
}


def _cell(release: str | None = None) -> cells.Cell:
    recipe = recipes.load("bridgetower")
    chosen = release_choice.release_for({"bridgetower": recipe}, release)["bridgetower"]
    return cells.expand(recipe, "bridgetower", "gaudi2", "published", [VARIANT], devices=8, release=chosen)[0]


def _row(tmp_path: Path, device_name: str, release: str | None, measured: float) -> Row:
    """workers2-mediapipe as published (8 cards, real data) on eight `device_name`s, GaudiTrainer's
    figure `measured`, planned to be judged against `release`."""
    cell = _cell(release)
    run_dir = tmp_path / "session" / "runs" / cell.cell_id
    run_dir.mkdir(parents=True)
    (run_dir / "cell.json").write_text(json.dumps(cell.to_json()))
    (run_dir / "sysinfo.json").write_text(json.dumps({"device_name": device_name, "world_size": 8}))
    throughput = {"gaudi_trainer": {"value": measured}, "after_warmup": {"value": measured}}
    summary = complete(world_size=8, software=dict(cell.software), throughput=throughput)
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_row.row(run_dir)


def test_show_lists_every_release_of_the_recipe_with_its_figure_date_and_commit():
    result = run_inv("show", "bridgetower", "--accelerator", "gaudi2", "--variant", VARIANT)
    assert result.returncode == 0, result.stderr
    listing = result.stdout.split(f"bridgetower--{VARIANT}")[0]
    assert "publication: the publication's figures" in listing
    for release_id, (device, figure, date, release) in RELEASES.items():
        shown = next(line for line in listing.splitlines() if line.strip().startswith(f"{release_id}:"))
        assert release in shown and date in shown and f"{figure} on 8 {device}" in shown, shown
    # By default the cell is judged by the publication's figure alone, as before, its software named.
    assert (
        "published: 847.7 samples/s on 8 gaudi2, the publication's (blog, 2nd version): optimum-habana 1.7.0"
        in (result.stdout)
    )
    assert "918.387" not in result.stdout.split(f"bridgetower--{VARIANT}")[1]


def test_show_with_a_reference_judges_the_cell_by_that_release_and_names_it():
    result = run_inv(
        "show",
        "bridgetower",
        "--accelerator",
        "gaudi2",
        "--variant",
        VARIANT,
        "--reference",
        "synapse-1.15.0",
    )
    assert result.returncode == 0, result.stderr
    cell_part = result.stdout.split(f"bridgetower--{VARIANT}")[1]
    assert "published: 918.387 samples/s on 8 gaudi2, release synapse-1.15.0: SynapseAI 1.15.0" in cell_part
    assert "(2024-03-30, aee789f4f)" in cell_part and "847.7" not in cell_part


def test_an_unknown_reference_is_refused_in_one_line_naming_the_known_ones():
    result = run_inv("show", "bridgetower", "--accelerator", "gaudi2", "--reference", "synapse-9.9")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    said = [line for line in result.stderr.splitlines() if "--reference synapse-9.9" in line]
    assert len(said) == 1, result.stderr
    assert "publication" in said[0] and all(release_id in said[0] for release_id in RELEASES)


def test_a_release_is_picked_by_its_release_as_written_in_any_case():
    assert (
        _cell("synapseai 1.14.0, optimum-habana 1.11.0.dev0 (released in v1.11.0)").references[0]["value"]
        == 930.245
    )
    assert _cell("PUBLICATION").references == _cell(None).references


def test_the_default_judges_every_cell_by_the_publication_as_before():
    recipe = recipes.load("bridgetower")
    for accelerator in ("gaudi2", "cuda", "cpu"):
        for scale in ("published", "smoke"):
            for cell in cells.expand(recipe, "bridgetower", accelerator, scale):
                assert not any("id" in r for r in [*cell.references, *cell.other_references]), cell.cell_id
    assert [r["value"] for r in _cell().references] == [847.7]


def test_the_report_names_the_software_the_publications_own_figure_ran(tmp_path):
    row = _row(tmp_path, "HL-225", None, measured=850.0)
    assert row.reference == 847.7 and row.verdict == verdicts.REPRODUCED
    page = report.markdown(tmp_path / "session", [row])
    assert "(847.70 on 8 gaudi2); the publication's (blog, 2nd version): optimum-habana 1.7.0" in page
    assert (
        row.reference_source
        == "blog, 2nd version; optimum-habana 1.7.0 (its README: validated for SynapseAI 1.11)"
    )


@pytest.mark.parametrize(("device_name", "device"), [("HL-325L", "gaudi3"), ("HL-225", "gaudi2")])
def test_gaudi3s_figure_judges_a_cell_only_on_a_gaudi3(tmp_path, device_name, device):
    row = _row(tmp_path, device_name, "synapse-1.20.0", measured=790.0)
    assert row.device == device
    if device == "gaudi3":
        assert row.reference == 783.481 and row.verdict == verdicts.REPRODUCED
        assert "release synapse-1.20.0: SynapseAI 1.20.0" in row.reference_source
        assert "2025-04-11" in row.reference_source
    else:
        # No Gaudi2 figure of that release: not judged, Gaudi3's shown as another device's.
        assert row.reference is None and row.verdict == verdicts.NO_REFERENCE


def test_the_report_names_the_release_and_date_of_the_figure_it_judged_by(tmp_path):
    row = _row(tmp_path, "HL-225", "synapse-1.19.0", measured=800.0)
    assert row.reference == 904.93 and row.verdict == verdicts.SLOWER
    page = report.markdown(tmp_path / "session", [row])
    assert "(904.93 on 8 gaudi2); release synapse-1.19.0: SynapseAI 1.19.0" in page
    assert "(2025-02-07, 6e97ad7f2)" in page


def test_a_reference_no_planned_recipe_has_stops_the_plan_naming_the_known_ones():
    loaded = recipes.load_unique(["bridgetower", "volo"])
    with pytest.raises(
        ReprokitError, match=r"--reference 1\.15: no such release in bridgetower, volo; known: "
    ):
        release_choice.release_for(loaded, "1.15")
    # A recipe without the release (another publication in the session) is judged against none.
    chosen = release_choice.release_for(loaded, "synapse-1.15.0")
    volo = cells.expand(loaded["volo"], "volo", "cuda", "published", release=chosen["volo"])
    assert chosen["bridgetower"] == "synapse-1.15.0" and all(not c.references for c in volo)


def test_recipes_json_lists_each_recipes_releases_within_its_schema():
    result = run_inv("recipes", "--json")
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator(schemas.schema("recipes")).validate(payload)
    found = {
        r["id"]: r for r in next(r for r in payload["recipes"] if r["name"] == "bridgetower")["references"]
    }
    assert found["publication"]["release"] is None
    for release_id, (device, figure, date, release) in RELEASES.items():
        assert found[release_id]["date"] == date and found[release_id]["release"].startswith(release)
        assert found[release_id]["figures"] == [
            {"variant": VARIANT, "device": device, "devices": 8, "value": figure}
        ]
