"""One run-directory contract: the trainers own it (reprokit_trainers/contract.json) and the host loads
the same file; both sides write and read only what it names."""

from __future__ import annotations

import json

import pytest

from reprokit.contract import definitions, records, rundirs, trainers
from reprokit.plan import recipes
from tests.conftest import ROOT

CONTRACT = json.loads((ROOT / "scripts" / "reprokit_trainers" / "contract.json").read_text())
# summary.json's fields, each declared with its type (the contract names the file).
FIELDS = set(
    json.loads((ROOT / "scripts" / "reprokit_trainers" / CONTRACT["summary_schema"]).read_text())[
        "properties"
    ]
)


def test_the_host_and_the_trainers_read_one_contract():
    from reprokit_trainers.common.record import contract

    assert trainers.contract() == CONTRACT == contract.CONTRACT
    assert records.SCHEMA_VERSION == contract.SCHEMA_VERSION == CONTRACT["schema_version"]
    assert (records.THROUGHPUT, records.QUALITY) == (contract.THROUGHPUT, contract.QUALITY)
    assert recipes.SOFTWARE_KEYS == contract.SOFTWARE_KEYS
    assert tuple(definitions.DEFINITIONS) == contract.DEFINITIONS


def test_every_summary_field_the_host_reads_is_in_the_contract():
    assert set(records.Summary.model_fields) - FIELDS == set()


def test_a_trainers_summary_holds_only_contract_fields_besides_its_own_switches(tmp_path):
    from reprokit_trainers.common.measure.meter import ThroughputMeter
    from reprokit_trainers.common.record.rundir import RunDir

    meter = ThroughputMeter(warmup_steps=1, total_steps=2)
    meter.step_end(4, boundary=True)
    meter.step_end(4, boundary=True)
    summary = RunDir(tmp_path).write_summary(meter)
    assert set(summary) - FIELDS == set()
    assert (tmp_path / CONTRACT["files"]["summary"]).exists()


@pytest.mark.parametrize("how", ["failed", "skipped"])
def test_a_summary_the_host_writes_for_a_run_that_did_not_complete_holds_only_contract_fields(tmp_path, how):
    written = rundirs.finish(tmp_path, 1) if how == "failed" else rundirs.skip(tmp_path, "needs x")
    assert set(written) - FIELDS == set()
    assert written["status"] in CONTRACT["statuses"]
