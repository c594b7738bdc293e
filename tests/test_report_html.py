"""The report: report.md and a self-contained report.html whose plots load in a real browser."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reprokit.plan.request import Request
from reprokit.report import curves, drawing
from reprokit.run import session, supervise
from reprokit.run.placement import plan
from tests.conftest import ROOT, run_inv
from tests.fakes import FAKES, fake_recipe
from tests.mdtable import column

VARIANTS = [
    {"name": "base", "baseline": True, "args": {"fake_rate": 100, "fake_tensorboard": True},
     "references": [{"device": "cpu", "devices": 8, "value": 800, "definition": "after_warmup"},
                    {"device": "gaudi2", "devices": 8, "value": 1200, "definition": "gaudi_trainer"}]},
    {"name": "faster", "args": {"fake_rate": 160},
     "references": [{"device": "cpu", "devices": 8, "value": 1600, "definition": "after_warmup"},
                    {"device": "gaudi2", "devices": 8, "value": 2000, "definition": "gaudi_trainer"}]},
    {"name": "rung", "args": {"fake_rate": 250}, "references": [{"ratio": 2.4, "definition": "after_warmup"}]},
    {"name": "broken", "args": {"fake_crash": "CUDA out of memory (fake)"}},
]  # fmt: skip


@pytest.fixture
def session_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("REPROKIT_TRAINERS_PATH", str(FAKES.parent))
    recipe = str(fake_recipe(tmp_path / "fake.yaml", VARIANTS))
    the_plan = plan(Request(recipes=[recipe], accelerator="cpu", scale="published", runtime="local"))
    folder = session.new_dir(str(tmp_path / "results"))
    session.save(folder, the_plan, Request(recipes=[recipe], accelerator="cpu", scale="published"))
    supervise.run_cells(the_plan, folder, report_line=lambda cell, outcome: None)
    return folder


def _browser() -> str | None:
    found = next(
        (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None
    )
    if found is None and os.environ.get("CI") == "true":
        pytest.fail("chromium is not installed: CI installs it from .ci/apt-packages.txt")
    if found is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return found


def _headless(browser: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-dev-shm-usage",
            f"--user-data-dir={tmp_path / 'chromium-profile'}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_inv_report_writes_markdown_and_a_self_contained_html_with_its_plots(session_dir, tmp_path):
    result = run_inv("report", str(session_dir))
    assert result.returncode == 0, result.stderr
    assert "reproduced" in result.stdout and "fake--broken" in result.stdout
    # The terminal's speedups carry their verdict, as the report's do.
    assert "1.60x (2.00x) slower" in result.stdout
    names = {p.name for p in session_dir.glob("*.png")}
    assert names == {"throughput-fake.png", "ladder-fake.png", "curves-fake.png"}
    md = (session_dir / "report.md").read_text()
    # Where the cells ran, beside how they were launched.
    assert "runtime local, in this machine's Python. " in md
    for name in names:
        assert f"]({name})" in md
    # The recipe's table: a row per variant, the published figures of every device beside the measured.
    assert column(md, "variant", "variant") == ["base", "faster", "rung", "broken"]
    assert column(md, "variant", "published gaudi2 (of 8)") == ["150.00", "250.00", "-", "-"]
    assert column(md, "variant", "verdict") == [
        "reproduced (1.00x the published figure)",
        "slower (0.80x the published figure); speedup 1.60x vs 2.00x published: slower",
        "no reference; speedup 2.50x vs 2.40x published: reproduced",
        "no result (failed)",
    ]
    assert column(md, "variant", "speedup, measured") == ["1.00x", "1.60x", "2.50x", "-"]
    assert column(md, "variant", "speedup, published") == ["1.00x", "2.00x", "2.40x", "-"]
    assert "RuntimeError: CUDA out of memory (fake)" in md

    page = (session_dir / "report.html").read_text()
    sources = re.findall(r'<img src="([^"]*)"', page)
    assert len(sources) == 3 and all(s.startswith("data:image/png;base64,") for s in sources)
    # Nothing outside the file: no links, no external scripts, styles or fonts.
    assert not re.search(r'\b(href|src)="(?!data:)', page) and "url(" not in page

    # Opened alone in a headless browser, in a folder with nothing beside it, the images decode.
    browser = _browser()
    alone = tmp_path / "mailed"
    alone.mkdir()
    probe = (
        "<script>window.addEventListener('load', () => { for (const img of document.images) "
        "img.setAttribute('data-natural-width', img.naturalWidth); });</script></body>"
    )
    (alone / "report.html").write_text(page.replace("</body>", probe))
    dom = _headless(
        browser, tmp_path, "--virtual-time-budget=5000", "--dump-dom", (alone / "report.html").as_uri()
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    widths = [int(w) for w in re.findall(r'data-natural-width="(\d+)"', dom.stdout)]
    assert len(widths) == 3 and all(w > 300 for w in widths), widths

    shot = tmp_path / "report.png"
    rendered = _headless(
        browser,
        tmp_path,
        f"--screenshot={shot}",
        "--window-size=1200,3000",  # down to the plots, below the recipes' assumptions
        (session_dir / "report.html").as_uri(),
    )
    assert rendered.returncode == 0 and shot.exists(), rendered.stderr[-2000:]
    from PIL import Image

    raw = Image.open(shot).convert("RGB").resize((300, 750)).tobytes()
    pixels = [raw[i : i + 3] for i in range(0, len(raw), 3)]
    # The plots' measured bars are this dark blue: on screen only if the images were drawn.
    target = tuple(int(drawing.MEASURED_COLOR[i : i + 2], 16) for i in (1, 3, 5))
    near = sum(1 for p in pixels if sum(abs(a - b) for a, b in zip(p, target, strict=True)) < 40)
    assert near > 50, f"{near} pixels of the plots' colour in the screenshot"


def test_curves_come_from_tensorboard_event_files_without_torch(session_dir):
    pytest.importorskip("tensorboard")
    run_dir = session_dir / "runs" / "fake--base"
    from_csv = curves.read_curves(run_dir)
    scalars = curves.read_scalars(run_dir / "tensorboard")
    assert [v for _, v in scalars["throughput/samples_per_second"]] == pytest.approx(
        [v for _, v in from_csv["samples_per_second"]]
    )
    (run_dir / "throughput.csv").unlink()
    from_events = curves.read_curves(run_dir)["loss"]
    assert [s for s, _ in from_events] == [s for s, _ in from_csv["loss"]]
    assert [v for _, v in from_events] == pytest.approx([v for _, v in from_csv["loss"]])
    # A run killed while writing leaves a half record: what came before it still reads.
    (event_file,) = (run_dir / "tensorboard").rglob("events.out.tfevents.*")
    event_file.write_bytes(event_file.read_bytes()[:-7])
    assert len(curves.read_scalars(run_dir / "tensorboard")["throughput/loss"]) == len(from_csv["loss"]) - 1
    # A record whose bytes changed fails its CRC: TensorBoard's loader stops there rather than read a
    # wrong value (what came before it still reads).
    data = bytearray(event_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    event_file.write_bytes(bytes(data))
    read = curves.read_scalars(run_dir / "tensorboard").get("throughput/loss", [])
    assert [v for _, v in read] == pytest.approx([v for _, v in from_csv["loss"]][: len(read)])
    assert len(read) < len(from_csv["loss"]) - 1
    # And the session gathers every cell's event files under one folder for `tensorboard --logdir`.
    run_inv("collect", str(session_dir))
    assert list((session_dir / "tensorboard" / "fake--base").rglob("events.out.tfevents.*"))


def test_the_report_modules_load_no_plotting_or_tensorboard_until_a_report_is_written():
    code = (
        "import sys; sys.path.insert(0, '.'); import tasks, reprokit.report.report, reprokit.report.plots;"
        "bad = [m for m in ('matplotlib', 'tensorboard', 'torch') if m in sys.modules]; assert not bad, bad"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
