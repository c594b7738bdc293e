"""An acceptance run's outputs: the terminal table (worst first), acceptance.html (one bar per node:
its figure, the fleet's median and band, the published figure), acceptance.json (its schema:
reprokit/schemas/acceptance.schema.json), acceptance.xml (JUnit: a test case per node, a failure per
slow or failed one) and the drain commands for the operator, printed and never run."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from rich.console import Console
from rich.table import Table

from reprokit import schemas
from reprokit.contract import files
from reprokit.contract.textsafe import html, line, markup
from reprokit.fleet.judging import FAILED, PASS, SLOW, NodeVerdict, Rule, spread
from reprokit.fleet.pairs import PairVerdict
from reprokit.fleet.targets import NODE

JSON, HTML, JUNIT = "acceptance.json", "acceptance.html", "acceptance.xml"
STYLES = {PASS: "green", SLOW: "yellow", FAILED: "red"}
LOG_WIDTH = 160


@dataclass
class Acceptance:
    """What an acceptance run found, and what it rests on."""

    session: Path
    cell: str
    mode: str
    rule: Rule
    verdicts: list[NodeVerdict]
    # The pairs' collective (--pairs), worst first.
    pairs: list[PairVerdict] = field(default_factory=list)

    @property
    def failing(self) -> list[NodeVerdict]:
        return [v for v in self.verdicts if v.status in (SLOW, FAILED)]

    @property
    def failing_pairs(self) -> list[PairVerdict]:
        return [v for v in self.pairs if v.status in (SLOW, FAILED)]

    def band(self) -> tuple[float, float, float] | None:
        """The fleet's median and its band (median -/+ the rule's threshold), over every measured node."""
        rates = [v.measured for v in self.verdicts if v.measured is not None]
        if not rates:
            return None
        median, _, gap = spread(rates, self.rule)
        return median, median - gap, median + gap

    def to_json(self) -> dict[str, Any]:
        band = self.band()
        return schemas.tagged("acceptance", {
            "session": str(self.session), "cell": self.cell, "mode": self.mode,
            "rule": {"k": self.rule.k, "min_gap": self.rule.min_gap, "text": self.rule.describe(self.mode)},
            "fleet": {"median": band[0], "low": band[1], "high": band[2]} if band else None,
            "passed": not self.failing and not self.failing_pairs,
            "nodes": [v.to_json() for v in self.verdicts],
            "pairs": [v.to_json() for v in self.pairs],
            "drain": drain_commands(self),
        })  # fmt: skip


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.4g}"


def print_table(found: Acceptance, console: Console | None = None) -> None:
    console = console or (Console() if Console().is_terminal else Console(width=LOG_WIDTH))
    view = Table(title=markup(f"acceptance of {found.cell} ({found.mode}), worst first"))
    for header in ("node" if found.mode == NODE else "device", "status", "per device", "others' median",
                   "gap", "published", "why"):  # fmt: skip
        view.add_column(header, overflow="fold")
    for v in found.verdicts:
        why = v.error if v.status == FAILED else "; ".join(v.reasons)
        view.add_row(
            markup(v.target),
            f"[{STYLES.get(v.status, 'magenta')}]{v.status}[/]",
            _rate(v.measured),
            _rate(v.others_median),
            "-" if v.gap is None else f"{-v.gap:+.0%}" if abs(v.gap) >= 0.005 else "0%",
            _rate(v.published),
            markup(why or ""),
        )
    console.print(view)
    if found.pairs:
        links = Table(title="the collective between pairs of nodes (all-reduce bus bandwidth), worst first")
        for header in ("pair", "status", "GB/s", "others' median", "gap", "why"):
            links.add_column(header, overflow="fold")
        for v in found.pairs:
            links.add_row(
                markup(v.pair), f"[{STYLES.get(v.status, 'magenta')}]{v.status}[/]", _rate(v.busbw),
                _rate(v.others_median), "-" if v.gap is None else f"{-v.gap:+.0%}",
                markup(v.error if v.status == FAILED else "; ".join(v.reasons)),
            )  # fmt: skip
        console.print(links)
    console.print(markup(f"Rule: {found.rule.describe(found.mode)}."), highlight=False)


def drain_commands(found: Acceptance) -> list[str]:
    """`scontrol update` for each slow or failed node: for the operator to run, never run here."""
    if found.mode != NODE:
        return []
    commands = []
    for v in found.failing:
        # One line (a trainer's error may hold a newline or an escape), short enough for Slurm's reason.
        why = line(f"reprokit accept: {v.status}: {v.error if v.status == FAILED else v.reasons[0]}", 200)
        commands.append(
            f"scontrol update nodename={shlex.quote(v.target)} state=drain reason={shlex.quote(why)}"
        )
    return commands


def junit(found: Acceptance) -> str:
    """JUnit XML: one test suite, a test case per node, a failure (slow) or an error (failed) each."""
    cases = [*found.verdicts, *found.pairs]
    suite = ElementTree.Element(
        "testsuite", name=f"reprokit accept {line(found.cell)}", tests=str(len(cases)),
        failures=str(sum(v.status == SLOW for v in cases)),
        errors=str(sum(v.status == FAILED for v in cases)),
    )  # fmt: skip
    for v in cases:
        name = v.target if isinstance(v, NodeVerdict) else f"pair {v.pair}"
        case = ElementTree.SubElement(suite, "testcase", classname=line(found.cell), name=line(name))
        if v.status == SLOW:
            ElementTree.SubElement(case, "failure", message=line("; ".join(v.reasons), 1000), type="slow")
        elif v.status == FAILED:
            # line(): a control character is no XML 1.0 character; a reader would refuse the whole file.
            ElementTree.SubElement(case, "error", message=line(v.error, 1000), type="failed")
        elif v.status != PASS:
            ElementTree.SubElement(case, "skipped", message=line("; ".join(v.reasons), 1000))
    return ElementTree.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


BAR_W, BAR_H, LABEL_W, GAP = 420, 18, 120, 6


def page(found: Acceptance) -> str:
    """acceptance.html: a bar per node (its figure per device), the fleet's band and median as a shaded
    strip and a line, the published figure as a dashed line, then the table with the reasons."""
    values = [x for v in found.verdicts for x in (v.measured, v.published) if x is not None]
    band = found.band()
    unit = next((v.unit for v in found.verdicts if v.unit), "")
    top = max(values + ([band[2]] if band else []), default=1.0) * 1.1
    height = len(found.verdicts) * (BAR_H + GAP) + 30

    def x(value: float) -> float:
        return LABEL_W + BAR_W * value / top

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{LABEL_W + BAR_W + 80}" height="{height}" '
             'role="img" aria-label="per-device figure of each node">']  # fmt: skip
    if band:
        parts.append(f'<rect x="{x(max(band[1], 0)):.1f}" y="0" width="{x(band[2]) - x(max(band[1], 0)):.1f}" '
                     f'height="{height - 20}" fill="#dde8f5"><title>fleet band</title></rect>')  # fmt: skip
        parts.append(f'<line x1="{x(band[0]):.1f}" x2="{x(band[0]):.1f}" y1="0" y2="{height - 20}" '
                     'stroke="#1f4e8c" stroke-width="2"><title>fleet median</title></line>')  # fmt: skip
    colors = {PASS: "#4c9a2a", SLOW: "#d69e00", FAILED: "#c0392b"}
    for i, v in enumerate(found.verdicts):
        y = i * (BAR_H + GAP)
        parts.append(f'<text x="{LABEL_W - 6}" y="{y + BAR_H - 4}" text-anchor="end" font-size="12">'
                     f"{html(v.target, 40)}</text>")  # fmt: skip
        if v.measured is not None:
            parts.append(f'<rect x="{LABEL_W}" y="{y}" width="{x(v.measured) - LABEL_W:.1f}" height="{BAR_H}" '
                         f'fill="{colors.get(v.status, "#888")}"><title>{html(v.target, 40)}: '
                         f"{_rate(v.measured)}</title></rect>")  # fmt: skip
        else:
            parts.append(f'<text x="{LABEL_W + 4}" y="{y + BAR_H - 4}" font-size="12" fill="#c0392b">'
                         "failed</text>")  # fmt: skip
        if v.published is not None:
            parts.append(f'<line x1="{x(v.published):.1f}" x2="{x(v.published):.1f}" y1="{y - 2}" '
                         f'y2="{y + BAR_H + 2}" stroke="black" stroke-dasharray="3,2"><title>published '
                         f"{_rate(v.published)}</title></line>")  # fmt: skip
    parts.append(f'<text x="{LABEL_W}" y="{height - 4}" font-size="11">0</text>'
                 f'<text x="{LABEL_W + BAR_W}" y="{height - 4}" font-size="11" text-anchor="end">'
                 f"{_rate(top)} {html(unit, 40)} per device</text></svg>")  # fmt: skip
    rows = "".join(
        f"<tr><td>{html(v.target, 64)}</td><td>{html(v.status)}</td><td>{_rate(v.measured)}</td>"
        f"<td>{_rate(v.others_median)}</td><td>{_rate(v.published)}</td>"
        f"<td>{html(v.error if v.status == FAILED else '; '.join(v.reasons), 2000)}</td>"
        f"<td>{html(', '.join(f'{k}={val}' for k, val in v.identity.items()), 2000)}</td></tr>"
        for v in found.verdicts
    )
    drains = "".join(f"<li><code>{html(c, 400)}</code></li>" for c in drain_commands(found))
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>acceptance of {html(found.cell)}</title></head><body>"
        f"<h1>Acceptance of {html(found.cell)} ({html(found.mode)})</h1>"
        f"<p>{'Passed' if not found.failing else f'{len(found.failing)} of {len(found.verdicts)} failing'}. "
        f"The rule: {html(found.rule.describe(found.mode))}; the shaded band is the fleet's median -/+ that "
        "gap, the dashed line the published figure per device.</p>"
        + "".join(parts)
        + "<table border='1' cellspacing='0' cellpadding='3'><tr><th>target</th><th>status</th>"
        "<th>per device</th><th>others' median</th><th>published</th><th>why</th><th>identity</th></tr>"
        + rows + "</table>"
        + (f"<h2>Drain (for the operator to run)</h2><ul>{drains}</ul>" if drains else "")
        + "</body></html>\n"
    )  # fmt: skip


def write(found: Acceptance) -> dict[str, Path]:
    """acceptance.json, .html and .xml in the session folder."""
    out = found.session
    return {
        "json": files.write_text(out / JSON, json.dumps(found.to_json(), indent=2, default=str) + "\n"),
        "html": files.write_text(out / HTML, page(found)),
        "junit": files.write_text(out / JUNIT, junit(found)),
    }


def say_drains(found: Acceptance) -> None:
    """The drain commands on stdout, beside the table: what an operator copies, or a script reads."""
    commands = drain_commands(found)
    if commands:
        print("# To drain the failing nodes (the kit drains nothing itself):")
        for command in commands:
            print(line(command))
