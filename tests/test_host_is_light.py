"""The host side never imports torch, and the trainers never import the kit."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_the_kit_and_its_tasks_do_not_import_torch():
    code = (
        "import sys; sys.path.insert(0, '.');"
        "import tasks, reprokit.session, reprokit.collect, reprokit.report, reprokit.render;"
        "import reprokit.runtimes.local, reprokit.runtimes.docker;"
        "bad = [m for m in ('torch', 'transformers', 'timm') if m in sys.modules]; print(bad); assert not bad"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_trainer_imports_the_kit():
    for script in (ROOT / "scripts").glob("*.py"):
        for line in script.read_text().splitlines():
            assert not line.lstrip().startswith(("import reprokit", "from reprokit")), (
                f"{script.name}: {line}"
            )
