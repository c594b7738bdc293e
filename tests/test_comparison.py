"""Verdicts that mean what they say: a run is judged against a published figure only under the same
definition and only when it did what the publication did; otherwise `not comparable`, with why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reprokit.collect import collect, run_row
from reprokit.contract import records
from reprokit.judge import verdicts
from reprokit.plan import cells, recipes
from reprokit.report import formats
from tests.fakes.summaries import complete


def _run_dir(tmp_path: Path, cell: cells.Cell, device: str, summary: dict, world: int = 1) -> Path:
    """A finished run of ``cell``; one whose summary says no ``software`` ran its publication's."""
    run_dir = tmp_path / "session" / "runs" / cell.cell_id
    run_dir.mkdir(parents=True)
    (run_dir / "cell.json").write_text(json.dumps(cell.to_json()))
    (run_dir / "sysinfo.json").write_text(json.dumps({"device_name": device, "world_size": world}))
    summary = {"software": dict(cell.software), **summary}
    (run_dir / "summary.json").write_text(json.dumps(complete(world_size=world, **summary)))
    return run_dir


def _cuda_cell(variant: str, **args) -> cells.Cell:
    cell = cells.expand(
        recipes.load("bridgetower"), "bridgetower", "cuda", "published", [variant], devices=1
    )[0]
    cell.args.update(args)
    return cell


def _measured(after: float, whole: float, gaudi: float | None = None) -> dict:
    found = {"after_warmup": {"value": after}, "whole_run": {"value": whole}}
    if gaudi is not None:
        found["gaudi_trainer"] = {"value": gaudi}
    return {"throughput": found, "samples_per_second": after, "train_samples_per_second": whole}


def test_a_cuda_cell_is_judged_by_the_whole_run_figure_against_the_h100_and_a100_references(tmp_path):
    # workers2 on one H100: published 602.1 on 8 (whole run, warm-up included) = 75.26 per device.
    cell = _cuda_cell("workers2")
    row = run_row.row(_run_dir(tmp_path, cell, "NVIDIA H100 80GB HBM3", _measured(after=90.0, whole=74.0)))
    assert row.device == "h100" and row.definition == "whole_run"
    assert row.measured == 74.0 and row.reference_per_device == pytest.approx(602.1 / 8)
    assert row.verdict == "reproduced" and row.ratio_per_device == pytest.approx(74.0 / (602.1 / 8))
    # The after-warm-up figure, 20% higher, is shown beside it but is not what is judged.
    assert row.measured_after_warmup == 90.0 and row.measured_whole_run == 74.0
    a100 = run_row.row(
        _run_dir(tmp_path / "a", cell, "NVIDIA A100-SXM4-80GB", _measured(after=60.0, whole=43.0))
    )
    assert (a100.device, a100.reference_per_device) == ("a100-80gb", pytest.approx(345.4 / 8))
    assert a100.verdict == "reproduced"


def test_gaudi2_figures_are_judged_by_gaudi_trainers_own_formula(tmp_path):
    cell = cells.expand(
        recipes.load("bridgetower"), "bridgetower", "gaudi2", "published", ["workers0"], devices=8
    )[0]
    row = run_row.row(
        _run_dir(tmp_path, cell, "GAUDI2", _measured(after=640.0, whole=450.0, gaudi=600.0), world=8)
    )
    assert row.definition == "gaudi_trainer" and row.measured == 600.0
    assert row.verdict == "reproduced" and row.normalization == "same device count (8)"


def _departures(*found: tuple[str, str]) -> list[dict[str, str]]:
    return [{"reason": reason, "kind": kind} for reason, kind in found]


def test_a_published_scale_cell_on_synthetic_data_is_not_comparable(tmp_path):
    cell = _cuda_cell("workers2")
    departures = _departures(("synthetic data", "throughput"), ("random weights", "quality"))
    summary = {**_measured(after=90.0, whole=74.0), "schema_version": 3, "departures": departures}
    row = run_row.row(_run_dir(tmp_path, cell, "NVIDIA H100 80GB HBM3", summary))
    assert (row.verdict, row.verdict_reasons) == ("not comparable", "synthetic data")
    assert row.quality_departures == "random weights"
    assert row.ratio_per_device is None and row.measured == 74.0  # the number stays, unjudged


def test_random_weights_alone_leave_the_verdict_standing_and_are_shown_beside_it(tmp_path):
    # Throughput does not depend on the weights: a finetune from the kit's own short pretraining is judged.
    cell = _cuda_cell("workers2")
    departures = _departures(("random weights", "quality"), ("offline tokenizer", "quality"))
    summary = {**_measured(after=90.0, whole=74.0), "schema_version": 3, "departures": departures}
    row = run_row.row(_run_dir(tmp_path, cell, "NVIDIA H100 80GB HBM3", summary))
    assert row.verdict in ("reproduced", "faster", "slower") and row.verdict_reasons is None
    assert row.ratio_per_device is not None
    assert formats.verdict(row) == f"{row.verdict}; quality only: random weights; offline tokenizer"


def test_a_schema_two_departure_has_no_kind_and_still_blocks_the_verdict(tmp_path):
    cell = _cuda_cell("workers2")
    summary = {**_measured(after=90.0, whole=74.0), "schema_version": 2, "departures": ["random weights"]}
    row = run_row.row(_run_dir(tmp_path, cell, "NVIDIA H100 80GB HBM3", summary))
    assert (row.verdict, row.verdict_reasons) == ("not comparable", "random weights")


def test_a_summary_from_the_kits_first_version_is_not_judged(tmp_path):
    # Schema 1 summaries (the kit's first version) held no figure per definition: nothing to judge.
    cell = _cuda_cell("workers2")
    run_dir = _run_dir(tmp_path, cell, "NVIDIA H100 80GB HBM3", {})
    (run_dir / "summary.json").write_text(
        json.dumps({"status": "ok", "samples_per_second": 90.0, "train_samples_per_second": 74.0})
    )
    row = run_row.row(run_dir)
    assert row.verdict == "not comparable" and row.measured is None
    assert row.verdict_reasons.startswith("written by a kit before summary schema 2")


def test_a_mediapipe_variant_whose_loader_fell_back_is_not_comparable(tmp_path):
    cell = cells.expand(
        recipes.load("bridgetower"), "bridgetower", "gaudi2", "published", ["workers2-mediapipe"], devices=8
    )[0]
    summary = {**_measured(after=900.0, whole=700.0, gaudi=850.0), "mediapipe": False}
    row = run_row.row(_run_dir(tmp_path, cell, "GAUDI2", summary, world=8))
    assert row.verdict == "not comparable"
    assert row.verdict_reasons == "mediapipe not in effect (asked True, ran False)"


def test_a_shortened_run_is_not_judged_by_a_whole_run_figure(tmp_path):
    cell = _cuda_cell("workers2", max_steps=40)
    row = run_row.row(_run_dir(tmp_path, cell, "NVIDIA H100 80GB HBM3", _measured(after=90.0, whole=60.0)))
    assert row.verdict == "not comparable"
    assert "shortened run (max_steps 40)" in row.verdict_reasons


def test_a_run_that_did_not_record_the_references_definition_is_not_judged(tmp_path):
    cell = _cuda_cell("workers2")
    summary = {"throughput": {"after_warmup": {"value": 90.0}}, "samples_per_second": 90.0}
    row = run_row.row(_run_dir(tmp_path, cell, "NVIDIA H100 80GB HBM3", summary))
    assert row.verdict == "not comparable" and row.verdict_reasons == "the run recorded no whole_run figure"


def test_speedups_are_over_the_baseline_of_the_same_group(tmp_path):
    recipe = recipes.load("bridgetower")
    found = {c.variant: c for c in cells.expand(recipe, "bridgetower", "gaudi2", "published", devices=8)}
    rates = {
        "workers0": 600.0,
        "workers1": 750.0,
        "workers0-v1": 530.0,
        "fastddp-workers1-mediapipe-v1": 800.0,
    }
    for variant, rate in rates.items():
        _run_dir(tmp_path, found[variant], "GAUDI2", _measured(after=rate, whole=rate, gaudi=rate), world=8)
    (tmp_path / "session" / "session.json").write_text("{}")
    rows = {r.variant: r for r in collect.rows(tmp_path / "session")}
    assert rows["workers1"].measured_speedup == pytest.approx(750 / 600)
    assert rows["workers1"].published_speedup == pytest.approx(747.4 / 601.5)
    # The first version's mediapipe rung: 1.51x over the first version's own baseline, not the second's.
    v1 = rows["fastddp-workers1-mediapipe-v1"]
    assert v1.measured_speedup == pytest.approx(800 / 530) and v1.published_speedup == 1.51
    assert v1.speedup_verdict == "reproduced"


def test_a_vit_rung_whose_compile_was_not_in_effect_is_a_departure(tmp_path):
    from reprokit.judge import verdicts

    (cell,) = [
        c
        for c in cells.expand(recipes.load("vit-speedups"), "vit-speedups", "cuda", "published", devices=8)
        if c.args.get("compile")
    ][:1]
    summary = {**_measured(after=3000.0, whole=2500.0), "torch_compile": False}
    record = records.read(_run_dir(tmp_path, cell, "NVIDIA A100-SXM4-80GB", summary, world=8))
    # pycls's flag is --compile; the trainer records what was in effect as torch_compile.
    assert verdicts.departures(record) == [
        records.Departure(reason="torch.compile not in effect (asked True, ran False)", kind="throughput")
    ]


def _with_software(tmp_path: Path, kernels: dict, variants_beyond: bool = False) -> Path:
    """The bridgetower recipe with a published_software block (and a variant beyond workers2)."""
    import yaml

    data = yaml.safe_load(
        (Path(__file__).resolve().parent.parent / "recipes" / "bridgetower" / "recipe.yaml").read_text()
    )
    data["name"] = "bt-software"  # a user's recipe: a name of its own
    data["published_software"] = {"source": "test", "stack": {"torch": "2.0"}, "kernels": kernels}
    if variants_beyond:
        data["variants"].append(
            {"name": "workers2-fused", "args": {"dataloader_num_workers": 2}, "beyond": "workers2"}
        )
    path = tmp_path / "bt-software.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _cell_of(path: Path, variant: str) -> cells.Cell:
    return cells.expand(recipes.load(str(path)), str(path), "cuda", "published", [variant], devices=1)[0]


def test_a_published_cell_that_ran_other_kernels_than_its_publication_is_not_comparable(tmp_path):
    cell = _cell_of(_with_software(tmp_path, {"optimizer": "adamw-per-tensor", "tf32": "off"}), "workers2")
    assert cell.software == {"optimizer": "adamw-per-tensor", "tf32": "off"}
    summary = {**_measured(after=90.0, whole=74.0), "software": {"optimizer": "adamw-foreach"}}
    row = run_row.row(_run_dir(tmp_path, cell, "NVIDIA H100 80GB HBM3", summary))
    assert row.verdict == "not comparable"
    assert (
        row.verdict_reasons
        == "optimizer: adamw-foreach, published: adamw-per-tensor; tf32: not recorded, published: off"
    )


def test_a_published_cell_that_ran_its_publications_kernels_is_judged(tmp_path):
    cell = _cell_of(_with_software(tmp_path, {"optimizer": "adamw-per-tensor"}), "workers2")
    summary = {
        **_measured(after=90.0, whole=74.0),
        "software": {"optimizer": "adamw-per-tensor", "tf32": "on"},
    }
    row = run_row.row(_run_dir(tmp_path, cell, "NVIDIA H100 80GB HBM3", summary))
    assert row.verdict in ("reproduced", "faster", "slower") and row.software["tf32"] == "on"


def test_a_publication_that_ran_other_kernels_on_gaudi_holds_each_accelerators_cells_to_its_own(tmp_path):
    import yaml

    path = _with_software(tmp_path, {"optimizer": "adamw-per-tensor (transformers)", "attention": "math"})
    data = yaml.safe_load(path.read_text())
    data["published_software"]["accelerators"] = {"gaudi2": {"optimizer": "fusedadamw-fused (habana)"}}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    recipe = recipes.load(str(path))
    on = {
        a: cells.expand(recipe, str(path), a, "published", ["workers2"], devices=1)[0].software
        for a in ("cuda", "gaudi2")
    }
    assert on["cuda"] == {"optimizer": "adamw-per-tensor (transformers)", "attention": "math"}
    assert on["gaudi2"] == {"optimizer": "fusedadamw-fused (habana)", "attention": "math"}


def test_a_variant_beyond_the_publication_is_read_as_its_speedup_over_the_published_variant(tmp_path):
    path = _with_software(tmp_path, {"optimizer": "adamw-per-tensor"}, variants_beyond=True)
    published = _cell_of(path, "workers2")
    beyond = _cell_of(path, "workers2-fused")
    assert beyond.software == {} and beyond.beyond == "workers2" and beyond.references == []
    _run_dir(
        tmp_path,
        published,
        "NVIDIA H100 80GB HBM3",
        {**_measured(after=90.0, whole=80.0), "software": {"optimizer": "adamw-per-tensor"}},
    )
    _run_dir(
        tmp_path,
        beyond,
        "NVIDIA H100 80GB HBM3",
        {**_measured(after=120.0, whole=100.0), "software": {"optimizer": "adamw-fused"}},
    )
    rows = {r.variant: r for r in collect.rows(tmp_path / "session")}
    assert rows["workers2-fused"].verdict == verdicts.BEYOND
    # Under the published variant's definition (H100: the whole-run figure), per device.
    assert rows["workers2-fused"].measured_speedup == pytest.approx(100.0 / 80.0)
    assert rows["workers2-fused"].ratio_per_device is None


SHARED = {
    "reason": "the machine was shared while the run measured: processes outside the run used 1.0 of 2 CPU "
    "cores on average (load average up to 6.5)",
    "kind": "throughput",
}


@pytest.mark.parametrize("disturbed", ["published", "beyond"])
def test_a_speedup_beyond_the_publication_needs_both_runs_free_of_throughput_departures(tmp_path, disturbed):
    from rich.console import Console

    from reprokit.report import terminal

    path = _with_software(tmp_path, {"optimizer": "adamw-per-tensor"}, variants_beyond=True)
    published, beyond = _cell_of(path, "workers2"), _cell_of(path, "workers2-fused")
    slow = {"departures": [SHARED]}
    _run_dir(tmp_path, published, "NVIDIA H100 80GB HBM3",
             {**_measured(after=5.0, whole=5.0), "software": {"optimizer": "adamw-per-tensor"},
              **(slow if disturbed == "published" else {})})  # fmt: skip
    _run_dir(tmp_path, beyond, "NVIDIA H100 80GB HBM3",
             {**_measured(after=98.4, whole=98.4), **(slow if disturbed == "beyond" else {})})  # fmt: skip
    row = {r.variant: r for r in collect.rows(tmp_path / "session")}["workers2-fused"]
    # 19.68x, measured: not a claim that today's software is 20 times faster.
    assert row.measured_speedup == pytest.approx(19.68)
    assert row.speedup_verdict == verdicts.NOT_COMPARABLE
    side = " (in the workers2 run)" if disturbed == "published" else ""
    assert row.speedup_verdict_reasons == SHARED["reason"] + side
    console = Console(width=400, record=True)
    terminal.print_table([row], console)
    assert "19.68x (-) not comparable" in console.export_text()
    assert "19.68x (-) beyond the publication" not in console.export_text()


def test_a_speedup_beyond_the_publication_of_two_clean_runs_is_read_as_such(tmp_path):
    path = _with_software(tmp_path, {"optimizer": "adamw-per-tensor"}, variants_beyond=True)
    published, beyond = _cell_of(path, "workers2"), _cell_of(path, "workers2-fused")
    _run_dir(tmp_path, published, "NVIDIA H100 80GB HBM3",
             {**_measured(after=90.0, whole=80.0), "software": {"optimizer": "adamw-per-tensor"}})  # fmt: skip
    _run_dir(tmp_path, beyond, "NVIDIA H100 80GB HBM3", _measured(after=120.0, whole=100.0))
    row = {r.variant: r for r in collect.rows(tmp_path / "session")}["workers2-fused"]
    assert (row.speedup_verdict, row.speedup_verdict_reasons) == (verdicts.BEYOND, None)


def test_a_smoke_speedup_beyond_the_publication_is_not_comparable(tmp_path):
    recipe = recipes.load("volo")
    smoke = {c.variant: c for c in cells.expand(recipe, "volo", "cpu", "smoke")}
    _run_dir(tmp_path, smoke["pretrain-d1"], "cpu", _measured(after=1.78, whole=1.5))
    _run_dir(tmp_path, smoke["pretrain-d1-modern-kernels"], "cpu", _measured(after=35.0, whole=30.0))
    row = {r.variant: r for r in collect.rows(tmp_path / "session")}["pretrain-d1-modern-kernels"]
    assert row.speedup_verdict == verdicts.NOT_COMPARABLE and row.speedup_verdict_reasons == "smoke scale"


@pytest.mark.parametrize(
    "change, expected",
    [
        (
            {"published_software": {"source": "x", "kernels": {"attn": "math"}}},
            "unknown software key(s) attn",
        ),
        ({"variants": [{"name": "a", "beyond": "b"}]}, "beyond names 'b', which is not a published variant"),
        (
            {"published_software": {"source": "x", "accelerators": {"gaudi2": {"optim": "fused"}}}},
            "published_software.accelerators.gaudi2: unknown software key(s) optim",
        ),
    ],
)
def test_a_recipe_names_only_known_software_and_published_variants(recipe_file, change, expected):
    from reprokit.contract.errors import ReprokitError

    with pytest.raises(ReprokitError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        recipes.load(str(recipe_file(change)))


def test_the_report_prints_the_publications_stack_beside_the_one_the_cells_ran(tmp_path):
    from reprokit.report import page_blocks, software_stacks

    cell = cells.expand(recipes.load("volo"), "volo", "cuda", "published", ["pretrain-d5"], devices=8)[0]
    assert cell.published_stack["timm"].startswith("0.4.5") and "sail-sg/volo" in cell.published_stack_source
    run_dir = _run_dir(tmp_path, cell, "NVIDIA H100 80GB HBM3", _measured(after=480.0, whole=400.0), world=8)
    versions = {"torch": "2.14.1", "timm": "1.0.15", "nvidia-dali-cuda120": None}
    (run_dir / "sysinfo.json").write_text(
        json.dumps({"device_name": "NVIDIA H100 80GB HBM3", "world_size": 8, "versions": versions})
    )
    table = {name: ran for name, _, ran in software_stacks.stack_table([run_row.row(run_dir)])[1]}
    # What the run recorded, matched by name; the GPU is the device; a product by the package that carries it.
    assert table["torch"] == "2.14.1" and table["timm"] == "1.0.15"
    assert table["gpu"] == "NVIDIA H100 80GB HBM3" and table["dali"] == "not installed"
    assert table["apex"] == "-"  # the trainers do not record Apex: nothing is claimed
    page = page_blocks.markdown(software_stacks.blocks([run_row.row(run_dir)]))
    assert "| timm | 0.4.5 (sail-sg/volo README, TokenLabeling requirements.txt) | 1.0.15 |" in page


def test_a_recipe_without_a_published_stack_adds_nothing_to_the_report(tmp_path, recipe_file):
    from reprokit.report import software_stacks

    cell = _cell_of(recipe_file(drop=("published_software",)), "workers2")
    row = run_row.row(_run_dir(tmp_path, cell, "NVIDIA H100 80GB HBM3", _measured(90.0, 74.0)))
    assert row.published_stack == {} and software_stacks.blocks([row]) == []
