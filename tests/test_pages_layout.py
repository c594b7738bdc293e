"""report.html and history.html read at a glance in a browser 1,400 px wide: nothing past the right edge,
no text over other text, cell ids whole, one verdict sentence per cell, smoke results marked in every
plot, the history's lines drawn per machine on a time axis that reads, from zero; and on a phone (390
and 500 px): no sideways scroll of the page, every verdict in view. Measured in Chromium's DOM and in
matplotlib's own layout, never by eye."""

from __future__ import annotations

import html
import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from reprokit.collect import machines
from reprokit.contract import sessions
from reprokit.judge.result_row import Row
from reprokit.plan.request import Request
from reprokit.report import drawing, formats, history, history_plots, report
from reprokit.run import session, supervise
from reprokit.run.placement import plan
from tests.fakes import FAKES, fake_recipe
from tests.mdtable import table
from tests.test_report_html import _browser, _headless

WIDTH = 1400
# A phone held upright (390 px) and a small tablet or a phone's browser zoomed out (500 px).
PHONES = (390, 500)
# The reasons a shared machine gave, on a rung and on its baseline: one departure, other numbers.
SHARED = "the machine was shared while the run measured: processes outside the run used {} of 2 CPU cores"
DEVICES = [("cpu", 800), ("gaudi2", 1200), ("h100", 1000)]
# Sixteen variants with the long names of the real recipes: a table of a column each ran off the page.
NAMES = ["baseline", "workers2-gpu-decode-fused-compile", "pretrain-d5-modern-kernels", "fsdp-b384-img256",
         "pretrain-d5-overlap-ddp", "multi-tensor", "pretrain-d5-foreach-adamw", "batch-second",
         "finetune-d5-512-sdpa", "pure-fp16", "pretrain-d1-modern-kernels", "uint8-loader", "pooled",
         "workers2-foreach-adamw", "finetune-d3-448", "amp"]  # fmt: skip


def _variants() -> list[dict]:
    found = []
    for i, name in enumerate(NAMES):
        args = {
            "fake_rate": 100 + 37 * i,
            "fake_data_wait": round(0.05 * (i % 8), 2),
            "fake_tensorboard": i < 6,
        }
        if i in (0, 3, 9):
            args["fake_departure"] = SHARED.format(f"{0.8 + i / 10:.1f}")
        references = [
            {"device": device, "devices": 8, "value": value + 40 * i, "definition": "after_warmup"}
            for device, value in DEVICES
        ]
        if i % 4 == 1:
            references = [{"ratio": 1.5 + i / 10, "definition": "after_warmup"}]
        found.append(
            {"name": name, "args": args, "references": references, **({"baseline": True} if i == 0 else {})}
        )
    return found


def _session(folder: Path, monkeypatch, scale: str, variants: list[dict]) -> Path:
    monkeypatch.setenv("REPROKIT_TRAINERS_PATH", str(FAKES.parent))
    recipe = str(fake_recipe(folder / f"{scale}.yaml", variants))
    request = Request(recipes=[recipe], accelerator="cpu", scale=scale, runtime="local")
    the_plan = plan(request)
    made = session.new_dir(str(folder / "results"))
    session.save(made, the_plan, request)
    supervise.run_cells(the_plan, made, report_line=lambda cell, outcome: None)
    report.write(made)
    return made


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A published-scale session of sixteen variants, three published devices, rungs and departures."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _session(tmp_path_factory.mktemp("published"), monkeypatch, "published", _variants())


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """A smoke session: its speedups must not read as the published ones they are drawn beside."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _session(tmp_path_factory.mktemp("smoke"), monkeypatch, "smoke", _variants()[:5])


@pytest.fixture(scope="module")
def history_page(published, smoke, tmp_path_factory) -> Path:
    """history.html of three sessions: the published one, the smoke one, the published one again."""
    results = tmp_path_factory.mktemp("history") / "results"
    for i, folder in enumerate((published, smoke, published)):
        _copy(folder, results / f"2026010{i}-000000", datetime(2026, 1, 1 + i, tzinfo=timezone.utc))
    return history.write(results, history.read(results).rows)


@pytest.fixture(scope="module")
def laid_out(published, smoke, history_page, tmp_path_factory) -> dict[tuple[str, int], dict]:
    """Each page measured at each width, in one Chromium for them all."""
    pages = {"published": published / "report.html", "smoke": smoke / "report.html", "history": history_page}
    return measure(pages, (WIDTH, *PHONES), tmp_path_factory.mktemp("chromium"))


# ---------------------------------------------------------------------------------------------
# Measured in Chromium


# Run in the page once it has loaded, every <details> opened: what lies past the body's right edge,
# which elements hold content wider than their box (a scroll bar, or text spilling out), which
# images the browser scaled down, which text boxes cover one another, how many lines each cell
# id takes, and where each verdict (a cell of a column headed `verdict`) lies. Posted to the page that
# frames it (measure: one frame per page and width), under the frame's name.
MEASURE = r"""
<script>
window.addEventListener('load', () => {
  for (const d of document.querySelectorAll('details')) d.open = true;
  const root = document.documentElement, body = document.body;
  const style = getComputedStyle(body);
  const right = body.getBoundingClientRect().right - parseFloat(style.paddingRight);
  const name = (el) => el.tagName.toLowerCase() + (el.className ? '.' + el.className : '');
  const out = {page: {scrollWidth: root.scrollWidth, clientWidth: root.clientWidth, right: right},
               outside: [], spilling: [], scaled: [], overlaps: [], broken: [], verdicts: []};
  for (const el of body.querySelectorAll('*')) {
    if (el.id === 'layout-measure' || getComputedStyle(el).display === 'inline') continue;
    const box = el.getBoundingClientRect();
    const text = (el.textContent || el.alt || '').slice(0, 60);
    if (box.right > right + 0.5) out.outside.push([name(el), Math.round(box.right), text]);
    if (el.scrollWidth > el.clientWidth + 1) out.spilling.push([name(el), el.scrollWidth, el.clientWidth, text]);
  }
  for (const img of document.images) {
    if (img.width < img.naturalWidth - 1) out.scaled.push([img.alt, img.naturalWidth, img.width]);
  }
  const boxes = [];
  const walker = document.createTreeWalker(body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(), i = 0; node; node = walker.nextNode(), i++) {
    if (!node.textContent.trim() || node.parentElement.closest('script, style')) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    const rects = [...range.getClientRects()].filter((r) => r.width > 0 && r.height > 0);
    for (const r of rects) boxes.push([i, r.left, r.top, r.right, r.bottom, node.textContent.slice(0, 40)]);
    if (/^[a-z0-9-]+--[a-z0-9-]+$/.test(node.textContent.trim())) {
      const lines = new Set(rects.map((r) => Math.round(r.top)));
      if (lines.size > 1) out.broken.push([node.textContent.trim(), lines.size]);
    }
  }
  boxes.sort((a, b) => a[2] - b[2]);
  for (let a = 0; a < boxes.length; a++) {
    for (let b = a + 1; b < boxes.length && boxes[b][2] < boxes[a][4] - 1; b++) {
      const [i, l1, t1, r1, b1, s1] = boxes[a], [j, l2, t2, r2, b2, s2] = boxes[b];
      if (i === j) continue;
      const w = Math.min(r1, r2) - Math.max(l1, l2), h = Math.min(b1, b2) - Math.max(t1, t2);
      if (w > 1 && h > 1) out.overlaps.push([s1, s2]);
    }
  }
  for (const table of document.querySelectorAll('table')) {
    const column = [...table.querySelectorAll('thead th')].findIndex((th) => th.textContent === 'verdict');
    if (column < 0) continue;
    for (const row of table.querySelectorAll('tbody tr')) {
      const box = row.children[column].getBoundingClientRect();
      out.verdicts.push([Math.round(box.left), Math.round(box.right), row.children[column].textContent.slice(0, 40)]);
    }
  }
  parent.postMessage([window.name, out], '*');
});
</script></body>"""

# The frames' page: each page in a frame as wide as a window would be, their measures gathered into one
# <pre> for --dump-dom once every frame has posted its own.
FRAMES = """<!DOCTYPE html><html><body style="margin: 0">
<script>
const found = {};
window.addEventListener('message', (event) => {
  found[event.data[0]] = event.data[1];
  if (Object.keys(found).length < document.querySelectorAll('iframe').length) return;
  const pre = document.createElement('pre');
  pre.id = 'layout-measure';
  pre.textContent = JSON.stringify(found);
  document.body.appendChild(pre);
});
</script>
{frames}
</body></html>"""


def measure(pages: dict[str, Path], widths: tuple[int, ...], tmp_path: Path) -> dict[tuple[str, int], dict]:
    """Each page laid out by one headless Chromium at each width (a frame that wide: its media queries
    and its scroll width are a window's), measured by MEASURE; keyed by (page, width)."""
    browser = _browser()
    frames = []
    for key, page in pages.items():
        probe = tmp_path / f"measured-{key}.html"
        probe.write_text(page.read_text().replace("</body>", MEASURE))
        frames += [
            f'<iframe name="{key} {width}" src="{probe.name}" width="{width}" height="900" '
            'style="border: 0; display: block"></iframe>'
            for width in widths
        ]
    framing = tmp_path / "frames.html"
    framing.write_text(FRAMES.replace("{frames}", "\n".join(frames)))
    dom = _headless(
        browser, tmp_path, f"--window-size={max(widths)},900", "--hide-scrollbars",
        "--virtual-time-budget=20000", "--run-all-compositor-stages-before-draw", "--dump-dom", framing.as_uri(),
    )  # fmt: skip
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="layout-measure">(.*?)</pre>', dom.stdout, re.S)
    assert found, dom.stdout[-2000:]
    measured = json.loads(html.unescape(found.group(1)))
    return {(key, width): measured[f"{key} {width}"] for key in pages for width in widths}


def _assert_reads_at_a_glance(found: dict) -> None:
    page = found["page"]
    assert page["scrollWidth"] <= page["clientWidth"], f"the page scrolls sideways: {page}"
    assert found["outside"] == [], f"past the right edge ({page['right']:.0f} px): {found['outside'][:8]}"
    assert found["spilling"] == [], f"content wider than its box: {found['spilling'][:8]}"
    assert found["scaled"] == [], f"plots scaled down, their labels smaller than drawn: {found['scaled']}"
    assert found["overlaps"] == [], f"text over text: {found['overlaps'][:8]}"
    assert found["broken"] == [], f"cell ids broken across lines: {found['broken'][:8]}"


def test_report_html_fits_1400px_with_no_text_over_text_and_cell_ids_whole(laid_out):
    for key in ("published", "smoke"):
        _assert_reads_at_a_glance(laid_out[key, WIDTH])


def test_history_html_fits_1400px_with_no_text_over_text(laid_out):
    _assert_reads_at_a_glance(laid_out["history", WIDTH])


@pytest.mark.parametrize("width", PHONES)
def test_on_a_phone_no_page_scrolls_sideways_and_every_verdict_is_in_view(laid_out, width):
    """A wide table reads as a card per row on a phone: the cell, its figures and its verdict in view,
    nothing past the edge, no text over text; the plots scaled to the width."""
    found = {}
    for key in ("published", "smoke", "history"):
        measured = laid_out[key, width]
        page = measured["page"]
        assert page["clientWidth"] == width, page  # the frame is the window it stands for
        assert measured["verdicts"], f"{key}: no verdict column measured"
        found[key] = {
            "page wider than the window": page["scrollWidth"] if page["scrollWidth"] > width else None,
            "past the right edge": measured["outside"][:4],
            "content wider than its box": measured["spilling"][:4],
            "text over text": measured["overlaps"][:4],
            "verdicts out of view": [v for v in measured["verdicts"] if v[0] < 0 or v[1] > width][:4],
        }
    problems = {key: {what: bad for what, bad in seen.items() if bad} for key, seen in found.items()}
    assert not any(problems.values()), f"at {width} px: {problems}"


def _copy(folder: Path, target: Path, started: datetime) -> None:
    target.mkdir(parents=True)
    for name in (sessions.SESSION_FILE, sessions.RESULTS_JSONL):
        (target / name).write_bytes((folder / name).read_bytes())
    stored = json.loads((target / sessions.SESSION_FILE).read_text())
    stored["created_at"] = started.isoformat()
    (target / sessions.SESSION_FILE).write_text(json.dumps(stored))


# ---------------------------------------------------------------------------------------------
# What the report says


def test_the_summary_table_has_a_verdict_sentence_per_cell_and_the_rest_a_click_away(published):
    text = (published / "report.md").read_text()
    headers, body = table(text, "cell")
    assert len(headers) <= 8 and len(body) == len(NAMES)
    for cell in body:
        verdict = cell[headers.index("verdict")]
        assert len(verdict.split()) <= 40, verdict
        # The shared-machine note of a rung and of its baseline, other numbers: said once.
        assert verdict.count("the machine was shared") <= 1, verdict
        assert "CPU cores" not in verdict  # its numbers are in the details
    (fsdp,) = [c for c in body if c[0] == "fake--fsdp-b384-img256"]
    assert fsdp[headers.index("verdict")] == (
        "not comparable (figure and speedup): the machine was shared while the run measured"
    )
    # Every column of every cell, its reasons whole, in a <details> of its own.
    page = (published / "report.html").read_text()
    assert page.count("<details>") == len(NAMES)
    assert SHARED.format("0.8") in page and SHARED.format("1.1") in page


def test_a_smoke_cell_says_not_comparable_in_its_row_as_the_banner_does(smoke):
    text = (smoke / "report.md").read_text()
    assert "they are not comparable with the published figures" in text
    headers, body = table(text, "cell")
    verdicts = [cell[headers.index("verdict")] for cell in body]
    assert verdicts and all(v.startswith("not comparable") and "smoke scale" in v for v in verdicts), verdicts
    assert not any("no reference" in v for v in verdicts)
    rows = [json.loads(line) for line in (smoke / "results.jsonl").read_text().splitlines()]
    assert {r["verdict"] for r in rows} == {"not comparable"}
    assert all("smoke scale" in r["verdict_reasons"] for r in rows)


def test_a_verdict_sentence_names_each_reason_once_and_the_publications_software_together():
    row = Row(
        status="ok",
        verdict="not comparable",
        verdict_reasons=f"{SHARED.format('1.0')}; GPU 0 also ran python (pid 7); tf32: not used (cpu), "
        "published: on; shortened run (max_steps 40): the whole_run figure depends on the run's length",
        speedup_verdict="not comparable",
        speedup_verdict_reasons=f"{SHARED.format('0.7')}; ddp: none, published: ddp-overlap; synthetic data",
        quality_departures="random weights; offline tokenizer",
    )
    assert formats.verdict_sentence(row) == (
        "not comparable (figure and speedup): the machine was shared while the run measured, GPU 0 also ran "
        "python, shortened run, synthetic data, software other than the publication's (tf32, ddp); "
        "quality only: random weights, offline tokenizer"
    )
    judged = Row(status="ok", verdict="reproduced", ratio_per_device=0.97, speedup_verdict="slower",
                 measured_speedup=1.6, published_speedup=2.0)  # fmt: skip
    assert formats.verdict_sentence(judged) == (
        "reproduced (0.97x the published figure); speedup 1.60x vs 2.00x published: slower"
    )


# ---------------------------------------------------------------------------------------------
# The plots, in matplotlib's own layout


@pytest.fixture
def figures(monkeypatch):
    """Each figure the report draws, laid out as saved, with its text boxes and legends (pixels)."""
    drawn: list[dict] = []
    original = drawing.save

    def save(fig, session_dir, name):
        fig.tight_layout()
        fig.canvas.draw()
        drawn.append({"name": name, **_layout(fig)})
        return original(fig, session_dir, name)

    monkeypatch.setattr(drawing, "save", save)
    return drawn


def _texts(fig) -> list:
    found = [fig._suptitle] if fig._suptitle else []
    for ax in fig.axes:
        found += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        found += [*ax.get_xticklabels(), *ax.get_yticklabels(), ax.xaxis.get_offset_text()]
        if ax.get_legend():
            found += ax.get_legend().get_texts()
    for legend in fig.legends:
        found += legend.get_texts()
    return [t for t in found if t.get_visible() and t.get_text().strip()]


def _layout(fig) -> dict:
    renderer = fig.canvas.get_renderer()
    texts = _texts(fig)
    boxes = [(t.get_text(), t.get_fontsize(), t.get_window_extent(renderer)) for t in texts]
    overlaps = [
        (a[0], b[0])
        for i, a in enumerate(boxes)
        for b in boxes[i + 1 :]
        if a[2].width and b[2].width and _overlap(a[2], b[2])
    ]
    legends = [legend.get_window_extent(renderer) for legend in fig.legends]
    legends += [ax.get_legend().get_window_extent(renderer) for ax in fig.axes if ax.get_legend()]
    covered = []
    for ax in fig.axes:
        for line in ax.get_lines():
            points = ax.transData.transform(
                list(zip(line.get_xdata(orig=False), line.get_ydata(orig=False), strict=True))
            )
            covered += [line.get_label() for box in legends for x, y in points if box.contains(x, y)]
        for patch in ax.patches:
            covered += [
                patch.get_label() for box in legends if _overlap(patch.get_window_extent(renderer), box)
            ]
    titles = [t.get_text() for t in [fig._suptitle, *(ax.title for ax in fig.axes)] if t is not None]
    hatched = [p.get_hatch() for ax in fig.axes for p in ax.patches]
    return {"overlaps": overlaps, "small": [(s, size) for s, size, _ in boxes if size < drawing.FONT],
            "covered": covered, "titles": titles, "hatched": hatched, "labels": [t for t, _, _ in boxes]}  # fmt: skip


def _overlap(a, b) -> bool:
    return min(a.x1, b.x1) - max(a.x0, b.x0) > 1 and min(a.y1, b.y1) - max(a.y0, b.y0) > 1


def test_every_report_plot_keeps_its_text_apart_readable_and_clear_of_its_bars_and_lines(published, figures):
    from PIL import Image

    drawn = report.write(published).plots
    assert {p.name.split("-")[0] for p in drawn} >= {"throughput", "breakdown", "ladder", "curves"}
    assert len(figures) == len(drawn)
    for fig in figures:
        assert fig["overlaps"] == [], (fig["name"], fig["overlaps"][:5])
        assert fig["small"] == [], (fig["name"], fig["small"][:5])  # >= 9 pt: 12.5 px at the size shown
        assert fig["covered"] == [], (fig["name"], fig["covered"][:5])  # the legend covers no bar or line
    # Drawn no wider than the page's column (pages.STYLE: 1,150 px), so never shown smaller than drawn.
    for plot in drawn:
        assert Image.open(plot.path).width <= 1148, plot.name


def test_smoke_results_are_marked_in_every_plot_and_their_speedups_hatched_beside_the_published(
    smoke, figures
):
    drawn = report.write(smoke).plots
    assert len(figures) == len(drawn) >= 4
    for fig in figures:
        assert any("smoke scale" in title for title in fig["titles"]), (fig["name"], fig["titles"])
    (ladder,) = [f for f in figures if f["name"].startswith("ladder-")]
    measured = [label for label in ladder["labels"] if re.fullmatch(r"\d+\.\d\dx smoke", label)]
    published_bars = [label for label in ladder["labels"] if re.fullmatch(r"\d+\.\d\dx", label)]
    assert measured and published_bars  # smoke speedups said so, beside the published ones
    assert drawing.UNJUDGED_HATCH in ladder["hatched"]


# ---------------------------------------------------------------------------------------------
# The history's plots


def _entry(
    i: int, hours: float, machine_fields: dict, rate: float, scale: str = "published"
) -> history.Entry:
    row = Row(cell_id="vit-speedups--baseline", unit="img/s", device_name="NVIDIA H100 80GB HBM3", scale=scale,
              measured_per_device=rate, image_id="sha256:" + "ab" * 32, provenance=machine_fields)  # fmt: skip
    started = datetime(2026, 11, 26, 17, 17, 40, tzinfo=timezone.utc) + timedelta(hours=hours)
    return history.Entry(f"s{i:02d}", started, None, machines.name(row), row)


def _series(fig) -> dict[str, list[float]]:
    ax = fig.axes[0]
    legend = fig.legends[0] if fig.legends else ax.get_legend()
    labels = [t.get_text() for t in legend.get_texts()]
    return {label: list(line.get_ydata()) for label, line in zip(labels, ax.get_lines(), strict=True)}


def test_the_history_draws_a_line_per_machine_not_a_point_per_container():
    """Sessions in Docker on two machines, each run in a container of its own (its hostname a new id)."""
    from matplotlib.figure import Figure

    legacy = [
        {"hostname": f"{i:012x}", "hw_host_processor_model_name": cpu, "hw_host_processor_vcpu_count": 64,
         "hw_host_memory_capacity": "503.5 GiB"}
        for i, cpu in enumerate(["AMD EPYC 9654", "Intel Xeon Platinum 8480+"] * 4)
    ]  # fmt: skip
    recorded = [{"hostname": f"{i:012x}", "machine": name} for i, name in enumerate(["dgx-01", "dgx-02"] * 3)]
    table = [_entry(i, i, fields, 100.0 + i) for i, fields in enumerate(legacy + recorded)]
    fig, unnamed = history_plots.figure("vit-speedups--baseline", table)
    assert isinstance(fig, Figure) and unnamed == 0
    series = _series(fig)
    assert sorted(series) == [
        "NVIDIA H100 80GB HBM3 on AMD EPYC 9654, 64 CPUs, 503.5 GiB",
        "NVIDIA H100 80GB HBM3 on Intel Xeon Platinum 8480+, 64 CPUs, 503.5 GiB",
        "NVIDIA H100 80GB HBM3 on dgx-01",
        "NVIDIA H100 80GB HBM3 on dgx-02",
    ]
    assert sorted(len(points) for points in series.values()) == [3, 3, 4, 4]
    # A hostname that is not a container's is the machine's.
    assert machines.name(Row(provenance={"hostname": "node-a"}, image_id="sha256:ab")) == "node-a"
    assert machines.name(Row(provenance={"hostname": "0123456789ab"})) == "0123456789ab"


def test_a_smoke_session_in_the_history_is_a_line_of_its_own_and_says_so():
    fields = {"machine": "dgx-01"}
    table = [_entry(i, i, fields, 100.0 + i, "smoke" if i % 2 else "published") for i in range(6)]
    series = _series(history_plots.figure("vit-speedups--baseline", table)[0])
    assert sorted(series) == [
        "NVIDIA H100 80GB HBM3 on dgx-01",
        "NVIDIA H100 80GB HBM3 on dgx-01 (smoke scale)",
    ]


@pytest.mark.parametrize(
    ("step", "label"),
    [
        (timedelta(seconds=10), r"\d\d:\d\d:\d\d"),
        (timedelta(minutes=7), r"\d\d:\d\d"),
        (timedelta(hours=5), r"\d\d:\d\d|\d\d [A-Z][a-z]{2}( \d\d:\d\d)?"),
        (timedelta(days=9), r"\d\d [A-Z][a-z]{2}|[A-Z][a-z]{2} \d{4}"),
    ],
)
def test_the_history_time_axis_labels_each_tick_whole_and_apart(step, label):
    """Sessions seconds apart read `17:18:10`, not `10` beside a lone `17:18`; days apart, `03 Dec`."""
    start = datetime(2026, 11, 26, 17, 17, 40, tzinfo=timezone.utc)
    table = [
        history.Entry(f"s{i}", start + i * step, None, "dgx-01",
                      Row(cell_id="c", unit="img/s", device_name="cpu", measured_per_device=54.2 + i % 2 * 1.2))
        for i in range(8)
    ]  # fmt: skip
    fig, _ = history_plots.figure("c", table)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()  # as savefig lays it out
    ticks = [t for t in fig.axes[0].get_xticklabels() if t.get_text()]
    assert len(ticks) >= 2
    for tick in ticks:
        assert re.fullmatch(label, tick.get_text()), [t.get_text() for t in ticks]
    layout = _layout(fig)
    assert layout["overlaps"] == [] and layout["small"] == [] and layout["covered"] == []


def test_the_history_y_axis_starts_at_zero_so_a_two_percent_step_looks_like_one():
    table = [_entry(i, i, {"machine": "dgx-01"}, 54.2 if i < 4 else 55.4) for i in range(8)]
    fig, _ = history_plots.figure("vit-speedups--baseline", table)
    low, high = fig.axes[0].get_ylim()
    assert low == 0 and 55.4 < high < 55.4 * 1.2


def test_a_run_records_the_machine_its_container_hides_and_the_docker_platform_names_it(
    tmp_path, monkeypatch
):
    import socket

    from reprokit.plan import accelerators
    from reprokit.run.containers import docker
    from reprokit.run.placement import plan as make_plan
    from reprokit_trainers.common.record.rundir import RunDir

    monkeypatch.setenv("REPROKIT_MACHINE", "dgx-07")
    RunDir(tmp_path).write_sysinfo()
    recorded = json.loads((tmp_path / "sysinfo.json").read_text())
    assert recorded["machine"] == "dgx-07" and recorded["hostname"] == socket.gethostname()
    monkeypatch.delenv("REPROKIT_MACHINE")
    RunDir(tmp_path).write_sysinfo()
    assert json.loads((tmp_path / "sysinfo.json").read_text())["machine"] == socket.gethostname()
    # Docker gives the container a hostname of its own (its id): the platform passes this machine's name.
    (cell,) = make_plan(
        Request(recipes=["bridgetower"], accelerator="cpu", scale="smoke", variants=["workers0"])
    ).cells
    spec = docker.container_spec(cell, tmp_path / "runs" / cell.cell_id, accelerators.get("cpu"), "image:tag")
    assert spec.environment["REPROKIT_MACHINE"] == socket.gethostname()
