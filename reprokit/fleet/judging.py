"""A verdict per node (or device) that rests on what was measured: its figure per device against the
published one where the cell has one, and against its siblings with a robust rule, each slow node's
row saying why from what its run recorded, each failed one named with its error.

The siblings' rule: a node is slow when it is below the median of the *other* nodes by more than
max(k x 1.4826 x MAD, min_gap) of that median, MAD the others' median absolute deviation (1.4826 x MAD
is the standard deviation of a normal spread, without the slow nodes' pull). Against the others, not
the whole fleet's median: with two nodes the MAD of both is half their gap, and no node could ever be
slow; with many, leaving one out changes the median by almost nothing.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprokit.contract import rundirs
from reprokit.judge import verdicts
from reprokit.judge.result_row import Row

PASS, SLOW, FAILED, UNJUDGED = "pass", "slow", "failed", "not judged"
# Worst first: the table's and the page's order.
ORDER = {FAILED: 0, SLOW: 1, UNJUDGED: 2, PASS: 3}
K = 3.0
MIN_GAP = 0.10
NORMAL_MAD = 1.4826
# A share of the measured window (data wait, communication) this far above the others' is a cause.
SHARE_GAP = 0.05
# Hardware facts a run records whose difference from the others' would explain a slow node.
FACTS = {
    "hw_accelerator_clock_sm_mhz": "SM clock (MHz)",
    "hw_accelerator_clock_soc_mhz": "SoC clock (MHz)",
    "hw_accelerator_power_limit_w": "power limit (W)",
    "hw_accelerator_pcie_link": "PCIe link",
    "hw_accelerator_ecc_mode": "ECC",
    "hw_accelerator_driver_version": "driver",
    "hw_accelerator_vbios_versions": "VBIOS",
    "hw_host_cpus_usable": "CPUs usable",
    "hw_host_memory_usable_bytes": "memory usable (bytes)",
    "image_id": "image",
}
# What names a node or device in its row: the target's own, then what its run recorded.
IDENTITY = ("hostname", "machine", "device_name", "hw_accelerator_model_name", "driver",
            "hw_accelerator_driver_version", "hw_accelerator_cuda_driver_version", "cuda",
            "hw_accelerator_pcie_link", "hw_accelerator_uuids", "hw_accelerator_serials",
            "hw_accelerator_pci_bus_ids", "hw_accelerator_vbios_versions", "hw_host_processor_model_name")  # fmt: skip


@dataclass(frozen=True)
class Rule:
    k: float = K
    min_gap: float = MIN_GAP

    def describe(self, kind: str = "node") -> str:
        return (
            f"slow when below the median of the other {kind}s by more than max({self.k:g} x 1.4826 x MAD, "
            f"{self.min_gap:.0%}) of it"
        )


DEFAULT_RULE = Rule()


@dataclass
class NodeVerdict:
    target: str
    kind: str
    cell_id: str
    status: str
    measured: float | None = None
    unit: str | None = None
    published: float | None = None
    published_verdict: str | None = None
    ratio_to_published: float | None = None
    others_median: float | None = None
    others_mad: float | None = None
    gap: float | None = None
    threshold: float | None = None
    reasons: list[str] = field(default_factory=list)
    error: str | None = None
    identity: dict[str, str] = field(default_factory=dict)
    job_id: str | None = None
    run_dir: str | None = None
    repeats: int | None = None
    spread: float | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def against_others(value: float, others: list[float], rule: Rule) -> tuple[float, float, float, float] | None:
    """(the others' median, their MAD, how far below that median `value` is as a share of it, the gap
    beyond which it is slow); None where there are no others."""
    if not others:
        return None
    median, mad, gap = spread(others, rule)
    return median, mad, (median - value) / median, gap / median


def spread(values: list[float], rule: Rule) -> tuple[float, float, float]:
    """(the values' median, their MAD, the rule's gap below that median, in the values' unit)."""
    median = statistics.median(values)
    mad = statistics.median([abs(x - median) for x in values])
    return median, mad, max(rule.k * NORMAL_MAD * mad, rule.min_gap * median)


def _rate(row: Row) -> float | None:
    rate = row.measured_per_device
    ok = row.status in ("ok", "partial") and verdicts.not_a_rate(rate) is None
    return float(rate) if ok and rate is not None else None


def _job(run_dir: Path) -> str | None:
    try:
        return str(json.loads((run_dir / rundirs.FILES["slurm_job"]).read_text())["job_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _shown(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _causes(row: Row, others: list[Row]) -> list[str]:
    """What this node's run measured that its siblings' did not: the data wait, the communication,
    the clocks, power and the hardware's facts, its departures."""
    found = []
    for name, what in (("data_wait_share", "data wait"), ("communication_share", "communication")):
        mine = getattr(row, name)
        theirs = [v for o in others if (v := getattr(o, name)) is not None]
        if mine is not None and theirs and mine - statistics.median(theirs) > SHARE_GAP:
            found.append(f"{what} {mine:.0%} of the measured window (others {statistics.median(theirs):.0%})")
    theirs = [o.power_mean_w for o in others if o.power_mean_w]
    if row.power_mean_w and theirs and row.power_mean_w < 0.9 * statistics.median(theirs):
        found.append(f"mean power {row.power_mean_w:.0f} W (others {statistics.median(theirs):.0f} W)")
    for key, what in FACTS.items():
        mine = row.provenance.get(key)
        values = [o.provenance.get(key) for o in others if o.provenance.get(key) is not None]
        if mine is not None and values and all(v != mine for v in values):
            common = statistics.mode(values)
            found.append(f"{what} {_shown(mine)} (others {_shown(common)})")
    theirs_departed = {d.reason for o in others for d in o.departures}
    found += [
        f"departure: {d.reason}"
        for d in row.departures
        if d.kind == "throughput" and d.reason not in theirs_departed
    ]
    return found


def _step_time(row: Row, others: list[Row]) -> str | None:
    theirs = [o.step_time_p50_s for o in others if o.step_time_p50_s]
    if row.step_time_p50_s and theirs:
        return f"median step {row.step_time_p50_s:.3g} s (others {statistics.median(theirs):.3g} s)"
    return None


def judge(pairs: list[tuple[Any, Row | None, Path]], rule: Rule = DEFAULT_RULE) -> list[NodeVerdict]:
    """Each target's verdict from its row (None: its run left no row), worst first. `pairs`: (target,
    row, run directory) with the target's `kind`, `name` and `identity`."""
    rates = {id(t): _rate(r) for t, r, _ in pairs if r is not None}
    measured = [(t, r) for t, r, _ in pairs if r is not None and rates.get(id(t)) is not None]
    found = []
    for target, row, run_dir in pairs:
        verdict = NodeVerdict(
            target=target.name, kind=target.kind, cell_id=row.cell_id if row else "", status=PASS,
            identity={**target.identity, **{k: str(v) for k in IDENTITY
                                             if row and (v := row.provenance.get(k)) not in (None, "")}},
            job_id=_job(run_dir), run_dir=str(run_dir),
        )  # fmt: skip
        rate = rates.get(id(target))
        if row is None or rate is None:
            verdict.status = FAILED
            verdict.error = (row.error if row and row.error else None) or (
                f"no rate measured ({row.status})" if row else "its run left nothing to read"
            )
            found.append(verdict)
            continue
        verdict.measured, verdict.unit = rate, row.unit
        verdict.repeats, verdict.spread = row.repeats, row.spread
        verdict.published, verdict.published_verdict = row.reference_per_device, row.verdict
        verdict.ratio_to_published = row.ratio_per_device
        judged = False
        if row.verdict in (verdicts.REPRODUCED, verdicts.FASTER, verdicts.SLOWER):
            judged = True
            if row.verdict == verdicts.SLOWER:
                verdict.status = SLOW
                verdict.reasons.append(
                    f"{row.ratio_per_device:.0%} of the published {row.reference_per_device:.4g} {row.unit} "
                    "per device" if row.ratio_per_device and row.reference_per_device else
                    f"slower than published: {row.verdict_reasons or ''}".strip()
                )  # fmt: skip
        others = [(t, r) for t, r in measured if t is not target]
        compared = against_others(rate, [rates[id(t)] for t, _ in others], rule)
        if compared is not None:
            judged = True
            median, mad, gap, threshold = compared
            verdict.others_median, verdict.others_mad = median, mad
            verdict.gap, verdict.threshold = gap, threshold
            if gap > threshold:
                verdict.status = SLOW
                verdict.reasons.append(
                    f"{gap:.0%} below the median of the other {len(others)} {target.kind}(s), {median:.4g} {row.unit} "
                    f"(more than {threshold:.0%})"
                )
        if verdict.status == SLOW:
            rows = [r for _, r in others]
            causes = _causes(row, rows)
            step = _step_time(row, rows)
            verdict.reasons += causes or [
                "nothing measured explains it: the same data wait, communication, clocks and departures "
                "as the others (look at the node itself: its CPUs, its cooling, what else runs there)"
            ]
            if step:
                verdict.reasons.append(step)
        if not judged:
            verdict.status = UNJUDGED
            verdict.reasons.append(
                "no published figure for this cell here and no other node measured: nothing to hold it to"
            )
        found.append(verdict)
    return sorted(found, key=lambda v: (ORDER[v.status], v.measured if v.measured is not None else 0.0))
