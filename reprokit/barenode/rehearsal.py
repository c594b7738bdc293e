"""The CPU rehearsal of a slice's cells before any GPU time is spent (`python -m reprokit.barenode
rehearse`): each cell the node would run goes through its trainer's own code at the published
architecture, resolution and per-device batch, with the arguments the node would pass, the device
half on fake tensors that count its memory (reprokit_trainers/rehearsal). A shape, argument or import
error is found here; each cell's peak device memory is estimated and held against an 80 GB device.

The host side never imports torch: the rehearsal runs as the trainers' own module, in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprokit.barenode import slices
from reprokit.contract import files, trainers
from reprokit.contract.console import console
from reprokit.contract.errors import ReprokitError, RunFailed

GIB = 2**30
# Rehearsals at once by default: one per trainer (their device steps differ in cost by 2x at most), and
# no more than the machine's cores: on two, four rehearsals only took turns, and each further process
# imported torch (and its trainer's stack) again, 2-5 CPU-s each.
MAX_JOBS = 4


def default_jobs() -> int:
    return max(1, min(MAX_JOBS, len(os.sched_getaffinity(0))))


@dataclass
class Rehearsed:
    slice: str
    cell_id: str
    result: dict[str, Any]


def cell_lines(names: list[str], runs: Path, slices_file: Path = slices.SLICES_FILE) -> list[dict[str, Any]]:
    """Each slice cell as the rehearsal module takes it: the trainer's whole command line as run.sh
    gives it on the node (output folder, a finetune's checkpoint), in the slices' order."""
    lines = []
    for name in names:
        for planned in slices.plan(name, "cuda", slices_file):
            if planned.left_out:
                continue
            cell = planned.cell
            folder = runs / name
            argv = ["--output_dir", str(folder / cell.cell_id), *cell.argv()]
            for arg, producer in cell.needed_cells().items():
                argv += [f"--{arg}", str(folder / producer / "checkpoint")]
            lines.append({"cell_id": f"{name}/{cell.cell_id}", "trainer": cell.trainer, "argv": argv})
    return lines


def rehearse(
    names: list[str],
    scratch: Path | None = None,
    slices_file: Path = slices.SLICES_FILE,
    workers_cap: int = 1,
    jobs: int = 0,
) -> list[Rehearsed]:
    """Rehearse the cells of the slices `names`; raises RunFailed (after the table) when a cell failed
    or would not fit. `jobs`: rehearsals at once (0: one per trainer, at most MAX_JOBS and one per core), each taking
    whole trainers, so that the cells of one trainer that share a device step still share it."""
    with tempfile.TemporaryDirectory(prefix="reprokit-rehearsal-") as temporary:
        where = scratch or Path(temporary)
        where.mkdir(parents=True, exist_ok=True)
        lines = cell_lines(names, where / "runs", slices_file)
        groups = _groups(lines, jobs or default_jobs())
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                filter(None, [trainers.search_path(), os.environ.get("PYTHONPATH")])
            ),
            # No hub: the rehearsal uses what the node uses (random weights, synthetic data).
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        env.pop("REPROKIT_ACCELERATOR", None)
        console.print(
            f"Rehearsing {len(lines)} cells of slice(s) {', '.join(names)} on the CPU (fake device)"
            + (f", {len(groups)} at once" if len(groups) > 1 else "")
        )
        # Each failed cell's traceback goes to rehearsal.log (kept with --keep); its one line to the table.
        (where / "rehearsal.log").unlink(missing_ok=True)  # this rehearsal's alone (a link there: removed)
        started = []
        for number, group in enumerate(groups):
            cells_file, out = where / f"cells-{number}.jsonl", where / f"rehearsal-{number}.jsonl"
            files.write_text(cells_file, "".join(json.dumps(line) + "\n" for line in group))
            out.unlink(missing_ok=True)
            command = [sys.executable, "-m", "reprokit_trainers.rehearsal", str(cells_file), "--out", str(out),
                       "--scratch", str(where), "--workers-cap", str(workers_cap)]  # fmt: skip
            log = files.open_append(where / f"rehearsal-{number}.log")
            started.append((subprocess.Popen(command, env=env, stdout=sys.stdout, stderr=log), log, out))
        codes = []
        for process, log, _ in started:
            codes.append(process.wait())
            log.close()
        by_id = {}
        for _, _, out in started:
            for text in out.read_text().splitlines() if out.exists() else []:
                result = json.loads(text)
                by_id[result["cell_id"]] = result
        # One log and one results file, in the slices' order, as a single rehearsal writes them.
        with files.open_append(where / "rehearsal.log") as log:
            for number in range(len(groups)):
                part = where / f"rehearsal-{number}.log"
                log.write(part.read_bytes())
                part.unlink()
        results = [by_id[line["cell_id"]] for line in lines if line["cell_id"] in by_id]
        files.write_text(where / "rehearsal.jsonl", "".join(json.dumps(r) + "\n" for r in results))
        if len(results) < len(lines):
            tail = (where / "rehearsal.log").read_text().strip().splitlines()[-1:] or ["no output"]
            raise ReprokitError(
                f"the rehearsal stopped after {len(results)} of {len(lines)} cells "
                f"(exit {max(codes, key=abs)}): {tail[0]}"
            )
    found = [Rehearsed(*r["cell_id"].split("/", 1), r) for r in results]
    print_table(found)
    console.print(versions_line())
    bad = [r for r in found if r.result["status"] != "ok" or not r.result["memory"]["fits"]]
    if bad:
        raise RunFailed(
            f"{len(bad)} of {len(found)} cells would fail on the node: "
            + "; ".join(f"{r.slice}/{r.cell_id}: {_why(r.result)}" for r in bad[:3])
        )
    return found


def _groups(lines: list[dict[str, Any]], jobs: int) -> list[list[dict[str, Any]]]:
    """The cells split into at most `jobs` rehearsals, whole trainers each (a device step is shared only
    within one), the trainers with the most cells first, each to the rehearsal with the fewest."""
    by_trainer: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        by_trainer.setdefault(line["trainer"], []).append(line)
    groups: list[list[dict[str, Any]]] = [[] for _ in range(max(1, min(jobs, len(by_trainer))))]
    for cells in sorted(by_trainer.values(), key=len, reverse=True):
        min(groups, key=len).extend(cells)
    return [group for group in groups if group]


def versions_line() -> str:
    """Which packages the rehearsal ran with, beside the bundle's pins and the node's torch: the
    trainers' packages must be the bundle's for a rehearsal to speak for the node."""
    from importlib import metadata

    from reprokit.barenode import wheels
    from reprokit.barenode.node import load_node, requirement_name

    pins = {requirement_name(r): r.split("==", 1)[1] for r in wheels.kit_requirements() if "==" in r}
    node = load_node()
    said = []
    for name in ("transformers", "timm", "accelerate", "datasets", "torch"):
        try:
            here = metadata.version(name)
        except metadata.PackageNotFoundError:
            here = "none"
        if name == "torch":
            said.append(f"torch {here} (the node runs its own {node.packages.get('torch')})")
        else:
            mark = "" if pins.get(name) == here else f" [red](the bundle's is {pins.get(name)})[/red]"
            said.append(f"{name} {here}{mark}")
    return "Rehearsed with " + ", ".join(said)


def _why(result: dict[str, Any]) -> str:
    if result["status"] != "ok":
        return result["error"]
    memory = result["memory"]
    return f"needs about {memory['estimate_bytes'] / GIB:.1f} GiB of {memory['device_bytes'] / GIB:.1f}"


def print_table(found: list[Rehearsed]) -> None:
    from rich.table import Table

    table = Table(title="Rehearsal: each cell at its published size on the fake device")
    for column in (
        "slice",
        "cell",
        "parameters",
        "batch",
        "px",
        "precision",
        "peak estimate",
        "of 80 GB",
        "verdict",
    ):
        table.add_column(column)
    for item in found:
        r = item.result
        if r["status"] != "ok":
            table.add_row(
                item.slice, item.cell_id, "", "", "", "", "", "", f"[red]failed[/red]: {r['error']}"
            )
            continue
        memory = r["memory"]
        verdict = "fits" if memory["fits"] else "[red]does not fit[/red]"
        if memory["fits"] and memory["tight"]:
            verdict = "fits, tight"
        table.add_row(
            item.slice,
            item.cell_id,
            f"{r['parameters'] / 1e6:.1f}M",
            str(r["batch"]),
            str(r["image_size"]),
            r["precision"],
            f"{memory['estimate_bytes'] / GIB:.1f} GiB",
            f"{memory['share']:.0%}",
            verdict,
        )
    console.print(table)
    console.print(
        "Estimate: the fake device's counted peak, DDP's buckets or FSDP's low-precision copies, and "
        f"{found[0].result.get('memory', {}).get('allowance_bytes', 0) / GIB:.1f} GiB for the CUDA context and workspaces"
        if found
        else "No cells."
    )
