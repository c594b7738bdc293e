"""What measuring costs: a real small training loop on the CPU, run with the kit's meter on and off.

On: steps go through StepLogger as the VOLO and ViT trainers' do: each batch's wait and each step's
time kept for the breakdown, a throughput.csv row and TensorBoard scalars every 10 steps (the
published BridgeTower logging interval), the energy meter's thread where this machine has an energy
source. Off: the same steps, bare. One model trains through pairs of steps, one on and one off (in
turn first), in one process; each kind's figure is its samples over its steps' CPU seconds (all the
process's threads, so the TensorBoard writer's and the energy meter's count too). CPU time, not wall
time, and neighbouring steps paired: on a machine shared with other work the wall clock moves by
several percent with the others' load. The ratio on/off comes with a 95% interval from resampling
the pairs (what the machine's noise allows to be said), and beside it the meter's own cost measured
alone, per step and per logged step. The meter must not change what it measures by more than 1%.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import tempfile
import time
from pathlib import Path

PAIRS, LOGGING, BATCH, SIZE = 500, 10, 32, 64
LIMIT = 0.01  # the largest change of the measured figure the meter may cause


def _setup(steps: int):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, stride=2, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(4),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 16, 10),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.utils.data.TensorDataset(
        torch.randn(steps * BATCH, 3, SIZE, SIZE), torch.randint(0, 10, (steps * BATCH,))
    )
    return model, optimizer, iter(torch.utils.data.DataLoader(data, batch_size=BATCH, num_workers=0))


def _step(model, optimizer, batch):
    import torch.nn.functional as F

    images, labels = batch
    loss = F.cross_entropy(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss


def _logger(folder: Path, warmup: int):
    from reprokit_trainers.common.rundir import RunDir
    from reprokit_trainers.common.steps import StepLogger

    return StepLogger(RunDir(folder), warmup_steps=warmup, global_batch=BATCH, logging_steps=LOGGING)


def alternating(pairs: int) -> tuple[list[float], list[float]]:
    """CPU seconds of each off step and each on step, in pairs."""
    import torch

    torch.set_num_threads(1)  # two shared cores: one thread steadies the step time
    model, optimizer, batches = _setup(2 * pairs + 10)
    seconds: dict[str, list[float]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as scratch:
        logger = _logger(Path(scratch), warmup=LOGGING)
        timed = logger.batches(batches)  # the on steps fetch through the meter, the off ones bare
        for batch in itertools.islice(batches, 10):  # warm-up: allocations
            _step(model, optimizer, batch)
        step, held = 0, {}
        for pair in range(pairs):
            for kind in ("off", "on") if pair % 2 == 0 else ("on", "off"):
                start = time.process_time()
                # Each side keeps its last batch until it fetches the next, as a loop's variable does.
                held[kind] = next(timed if kind == "on" else batches)
                loss = _step(model, optimizer, held[kind])
                if kind == "on":
                    step += 1
                    logger.step(step, 0.0, 1e-3, loss)
                seconds[kind].append(time.process_time() - start)
        logger.close()
    return seconds["off"], seconds["on"]


def own_cost(steps: int = 20_000) -> tuple[float, float]:
    """The meter's CPU seconds per step and per logged step, on a loop that does nothing else."""
    import torch

    loss = torch.tensor(1.0)
    found = []
    for logging in (10**9, LOGGING):
        with tempfile.TemporaryDirectory() as scratch:
            logger = _logger(Path(scratch), warmup=5)
            logger.logging_steps = logging
            start = time.process_time()
            for step, _ in enumerate(logger.batches(range(steps)), start=1):
                logger.step(step, 0.0, 1e-3, loss)
            found.append((time.process_time() - start) / steps)
            logger.close()
    per_step, with_rows = found
    return per_step, (with_rows - per_step) * LOGGING


def _ratio(off: list[float], on: list[float]) -> float:
    return sum(off) / sum(on)  # equal samples per block: the ratio of rates is that of seconds


def measure(pairs: int = PAIRS) -> list[dict]:
    # The logger prints a line per logged step, as in a run (whose lines go to a log file).
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        off, on = alternating(pairs)
        per_step, per_row = own_cost()
    ratio = _ratio(off, on)
    draw = random.Random(0)
    resampled = sorted(
        _ratio(*zip(*(draw.choice(list(zip(off, on, strict=True))) for _ in off), strict=True))
        for _ in range(2000)
    )
    low, high = resampled[50], resampled[-51]
    step_s = sum(off) / len(off)
    return [
        {
            "suite": "meter",
            "name": f"meter {kind}",
            "samples_per_cpu_s": len(seconds) * BATCH / sum(seconds),
            "step_ms": 1e3 * sum(seconds) / len(seconds),
            "steps": len(seconds),
            "ratio_on_off": ratio if kind == "on" else 1.0,
            "interval_95": f"{low:.4f}-{high:.4f}" if kind == "on" else "",
            "own_us_per_step": 1e6 * per_step if kind == "on" else None,
            "own_us_per_logged_step": 1e6 * per_row if kind == "on" else None,
            "own_share": (per_step + per_row / LOGGING) / step_s if kind == "on" else None,
            "load_average": round(os.getloadavg()[0], 2),
        }
        for kind, seconds in (("off", off), ("on", on))
    ]


def verdict(rows: list[dict]) -> str:
    """The headline: the ratio, whether it is within 1%, and how sure this machine lets one be."""
    on = next(r for r in rows if r["name"] == "meter on")
    low, high = (float(x) for x in on["interval_95"].split("-"))
    if low >= 1 - LIMIT:
        within = f"within {LIMIT:.0%}"
    elif on["ratio_on_off"] >= 1 - LIMIT:
        within = f"within {LIMIT:.0%}; this machine's noise leaves the interval below it"
    else:
        within = f"OUTSIDE {LIMIT:.0%}"
    return (
        f"meter overhead: on/off {on['ratio_on_off']:.4f} in samples per CPU-second ({within}; 95% interval "
        f"{on['interval_95']} over {on['steps']} pairs of steps, load {on['load_average']}); the meter's own cost "
        f"alone: {on['own_us_per_step']:.1f} us a step and {on['own_us_per_logged_step']:.0f} us a logged step, "
        f"{on['own_share']:.3%} of this loop's {on['step_ms']:.0f} ms steps"
    )
