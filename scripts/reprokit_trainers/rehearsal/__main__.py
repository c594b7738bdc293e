"""`python -m reprokit_trainers.rehearsal CELLS.jsonl --out RESULTS.jsonl --scratch DIR`

Rehearses each cell of CELLS.jsonl (one JSON object a line: ``cell_id``, ``trainer``, ``argv``, the
trainer's whole command line as the node would run it) and appends its result to RESULTS.jsonl the
moment it ends: what ran through the trainer's own code, what could not run here and why, the
parameters, and the device-memory estimate held against an 80 GB device. A cell's failure is one line
in its result, never the end of the others. Exit status 0 when every cell rehearsed and fits.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from . import fakedevice, plan

# A trainer's rehearsal is a module of its own package, `reprokit_trainers.<trainer>.rehearse`: its
# `prepare(argv, scratch, workers_cap)` (the cell's real half: arguments, data, one batch), its
# `device_step(prepared, device)` (the model and steps on the fake device) and `HOST_ONLY`.
HOOK = "rehearse"
TRAINERS = __package__.rpartition(".")[0]


@functools.cache
def rehearsed() -> tuple[str, ...]:
    """The trainers that have a rehearsal, found in the trainers package's folders (never a list kept
    here), without importing a trainer: looked up once, not for each cell."""
    package = importlib.import_module(TRAINERS)
    return tuple(
        sorted({p.parent.name for folder in package.__path__ for p in Path(folder).glob(f"*/{HOOK}.py")})
    )


def trainer_module(trainer: str) -> Any:
    """A trainer's rehearsal module, imported when a cell of it comes: a rehearsal of ViT's cells alone
    never pays for BridgeTower's transformers, datasets and accelerate (about 4 CPU-s a process)."""
    if trainer not in rehearsed():
        raise KeyError(f"{trainer}: not a trainer the rehearsal knows ({', '.join(rehearsed())})")
    return importlib.import_module(f"{TRAINERS}.{trainer}.{HOOK}")


def device_key(trainer: str, argv: list[str]) -> tuple[str, ...]:
    """The arguments that decide a cell's device step: every one but the host-only ones (rows,
    workers, logging) and where it writes. Cells with the same key and the same batch handed over
    (plan.handed_over) share one device step."""
    host_only = {*trainer_module(trainer).HOST_ONLY, "output_dir"}
    kept: list[str] = []
    skip = False
    for token in argv:
        if token.startswith("--"):
            skip = token[2:].split("=", 1)[0] in host_only
        if not skip:
            kept.append(token)
    return (trainer, *kept)


def _one_line(error: BaseException) -> str:
    if isinstance(error, SystemExit):  # a trainer's own configuration error: already one line
        return str(error.code)
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:400]


def rehearse(
    cell: dict[str, Any], scratch: Path, workers_cap: int, done: dict[tuple[Any, ...], dict]
) -> dict:
    trainer = trainer_module(cell["trainer"])
    started = time.perf_counter()
    result: dict[str, Any] = {"cell_id": cell["cell_id"], "trainer": cell["trainer"]}
    try:
        prepared = trainer.prepare(list(cell["argv"]), scratch, workers_cap)
        result.update(batch=prepared.batch, image_size=prepared.image_size, precision=prepared.precision)
        key = (device_key(cell["trainer"], list(cell["argv"])), plan.handed_over(prepared.data))
        if key in done:
            step = dict(done[key], same_device_step_as=done[key]["cell_id"])
        else:
            step = trainer.device_step(prepared, fakedevice.FakeDevice())
            step["cell_id"] = cell["cell_id"]
            done[key] = step
        result.update(
            status="ok",
            ran=[*prepared.ran, *step["ran"]],
            skipped=[*prepared.skipped, *step["skipped"]],
            notes=prepared.notes,
            parameters=step["parameters"],
            memory=step["memory"],
            same_device_step_as=step.get("same_device_step_as"),
        )
    except (Exception, SystemExit) as error:  # noqa: BLE001 -- every cell gets its line
        traceback.print_exc(file=sys.stderr)
        result.update(status="failed", error=_one_line(error))
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def line(result: dict[str, Any]) -> str:
    if result["status"] != "ok":
        return f"FAILED {result['cell_id']}: {result['error']}"
    memory = result["memory"]
    verdict = "fits" if memory["fits"] else "DOES NOT FIT"
    tight = ", tight" if memory["fits"] and memory["tight"] else ""
    shared = f" (device step of {result['same_device_step_as']})" if result.get("same_device_step_as") else ""
    return (
        f"ok {result['cell_id']}: {result['parameters'] / 1e6:.1f}M parameters, batch {result['batch']} at "
        f"{result['image_size']}px {result['precision']}: {memory['estimate_bytes'] / fakedevice.GIB:.1f} GiB "
        f"of {memory['device_bytes'] / fakedevice.GIB:.1f}, {verdict}{tight}{shared} [{result['seconds']} s]"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reprokit_trainers.rehearsal", description=__doc__)
    parser.add_argument("cells", type=Path, help="JSON lines: cell_id, trainer, argv")
    parser.add_argument("--out", type=Path, required=True, help="results, one JSON line per cell")
    parser.add_argument("--scratch", type=Path, required=True, help="where the data and run folders go")
    # One worker: the trainers' multi-process loading (the dataset pickled, worker_init_fn run) for the
    # price of the one batch taken; each further worker decodes a batch nobody takes.
    parser.add_argument("--workers-cap", type=int, default=1, help="loader workers at most (default 1)")
    args = parser.parse_args(argv)
    import warnings

    warnings.filterwarnings("ignore")
    import torch

    # What computes for real here is one batch's loading and decoding; everything else is fake. Torch's
    # second intra-op thread saves nothing on so little and spins on a busy machine (the VOLO
    # gpu_decode cell's batch: 1.6 CPU-s on one thread, 5-6.5 on two, with 4 rehearsals at once).
    torch.set_num_threads(1)
    cells = [json.loads(text) for text in args.cells.read_text().splitlines() if text.strip()]
    args.scratch.mkdir(parents=True, exist_ok=True)
    done: dict[tuple[Any, ...], dict] = {}
    good = True
    with open(args.out, "a") as out:
        for cell in cells:
            result = rehearse(cell, args.scratch, args.workers_cap, done)
            out.write(json.dumps(result) + "\n")
            out.flush()
            print(line(result), flush=True)
            good = good and result["status"] == "ok" and result["memory"]["fits"]
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
